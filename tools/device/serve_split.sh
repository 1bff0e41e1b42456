#!/usr/bin/env bash
# Server on 2 cores, load generator on other cores (clients off the server's CPUs, as in a real
# deployment): perfx bench-serve with 1 and 64 clients. Needs the build of serve_scaling.sh (/tmp/rel).
set -uo pipefail
export LD_LIBRARY_PATH="$PWD/.devdeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -x /tmp/rel/perfx ]] || bash tools/device/serve_scaling.sh >/dev/null
P=/tmp/rel/perfx
taskset -c 0,1 $P serve -m models/default --port 18080 --max-batch 64 2>/dev/null &
pid=$!
sleep 2
for mt in 48 128; do
  for c in 1 64; do
    n=$(( c == 1 ? 16 : 128 ))
    echo "max_tokens $mt clients $c"
    taskset -c 4-15 $P bench-serve --url http://127.0.0.1:18080 -c $c --requests $n --prompt-tokens 12 \
      --max-tokens $mt 2>&1 | grep -E "throughput|TTFT|TPOT"
  done
done
kill $pid
