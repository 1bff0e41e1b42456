#!/usr/bin/env bash
# Issue 10's robustness and consistency items on the GPU, one device call:
#   1. `perfx serve --device cuda` on random:llama-2-7b (AWQ W4 g128, --max-batch 256) under
#      `perfx bench-serve -c 256 --requests 1000 --disconnect-fraction 0.1 --check` (prompt 128 /
#      output 128, ignore_eos): no request lost (completed + disconnected = 1000, 0 failed), every
#      completed response with usage 128 / finish_reason "length", then the server's KV blocks in use;
#   2. the same load on models/default at temperature 0 with --compare-solo: each request's prompt is
#      first served alone, and the report gives the share of responses equal to it.
# Binaries from tools/device/pack_cuda_bins.sh (or the quick repack); logs in $OUT.
#   run: command "bash tools/device/serve_soak.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
soak() {  # name, model, extra bench-serve flags...
  local name=$1 model=$2 port=18741
  shift 2
  "$B/perfx" serve -m "$model" --device cuda --port $port --max-batch 256 > "$OUT/serve_$name.log" 2>&1 &
  local pid=$!
  for i in $(seq 1 120); do curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 1; done
  timeout 240 "$B/perfx" bench-serve --url "http://127.0.0.1:$port" --clients 256 --requests 1000 \
    --duration 200 --prompt-tokens 128 --max-tokens 128 --disconnect-fraction 0.1 --check "$@" \
    --json "$OUT/soak_$name.json" > "$OUT/soak_$name.txt" 2>&1
  echo "$name rc=$?: $(tr '\n' ' ' < "$OUT/soak_$name.txt" | tr -s ' ' | cut -c1-900)"
  sleep 1
  echo "  metrics: $(curl -fsS "http://127.0.0.1:$port/metrics" | grep -E '^perfx_(kv_blocks_used|requests_total)' | tr '\n' ' ')"
  kill $pid 2> /dev/null
  wait $pid 2> /dev/null
}
soak 7b random:llama-2-7b
soak default models/default --compare-solo
echo "total $(( $(date +%s) - T0 )) s"
