#!/usr/bin/env bash
# Serving throughput alone (issue 10): `perfx serve --device cuda` on random:llama-2-7b (AWQ W4
# g128) under `perfx bench-serve` at CLIENTS concurrent clients (default "1 256"; prompt 128 /
# output 128, unique prompts, REQS requests (default 2 per client; REQS_<clients> for one of them),
# at most 60 s each), then the server's
# metrics. The serving half of cuda_final.sh without its GGUF / model-test parts. SERVE_ENV
# ("VAR=value ...") is set for the server and SERVE_ARGS added to its flags; TEMP (default 0) is
# the requests' temperature.
#   run: command "bash tools/device/serve_sweep.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
port=18731
env ${SERVE_ENV:-} "$B/perfx" serve -m random:llama-2-7b --device cuda --port $port --max-batch 256 ${SERVE_ARGS:-} > "$OUT/serve.log" 2>&1 &
pid=$!
for i in $(seq 1 120); do curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 1; done
echo "serve up after $(( $(date +%s) - T0 )) s"
for c in ${CLIENTS:-1 256}; do
  nv=REQS_$c
  n=${!nv:-${REQS:-$(( c < 4 ? 8 : c * 2 ))}}
  timeout 120 "$B/perfx" bench-serve --url "http://127.0.0.1:$port" --clients $c --requests $n --duration 60 \
    --prompt-tokens 128 --max-tokens 128 --temperature "${TEMP:-0}" --json "$OUT/serve_$c.json" \
    > "$OUT/serve_$c.txt" 2>&1
  echo "serve c=$c rc=$?: $(tr '\n' ' ' < "$OUT/serve_$c.txt" | tr -s ' ' | cut -c1-700)"
done
curl -fsS "http://127.0.0.1:$port/metrics" | grep -E "^perfx_(kv_blocks_used|engine_steps_total|engine_step_tokens_total|requests_total|engine_step_seconds_total|scheduler_host_seconds_total|scheduler_host_cpu_seconds_total)"
kill $pid 2> /dev/null
wait $pid 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
