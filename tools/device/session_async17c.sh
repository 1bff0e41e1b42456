#!/usr/bin/env bash
# Seventeenth session, third call: the binary with step_ids_ allocated at 64 Ki entries from the
# start (session_async17b.sh's 7B at 256 clients lost 3-4 % overlapped, TTFT p99 ~770 ms: fed
# prefill steps of up to 768 tokens grew step_ids_ from 256, and each growth re-captured every
# decode graph). Serving A/B as in session_async17b.sh: 7B at 256 clients (two rounds) and 64,
# TinyLlama at 256, overlapped against PERFX_DECODE_OVERLAP=0, arms alternating.
#   run: command "bash tools/device/session_async17c.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
port=18743
serve_arm() {  # MODEL OVERLAP LABEL
  over_budget && { echo "$3: skipped (budget)"; return; }
  PERFX_DECODE_OVERLAP=$2 "$B/perfx" serve -m "random:$1" --device cuda --port $port --max-batch 256 \
    > "$OUT/serve_$3.log" 2>&1 &
  local pid=$!
  for i in $(seq 1 150); do curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 1; done
  for c in ${CLIENTS:-256}; do
    local n=$(( c < 4 ? 16 : c * 2 ))
    timeout 120 "$B/perfx" bench-serve --url "http://127.0.0.1:$port" --clients $c --requests $n \
      --duration 60 --prompt-tokens 128 --max-tokens 128 --temperature 0 > "$OUT/s_$3_c$c.txt" 2>&1
    echo "$3 c=$c: $(grep -E 'throughput|TTFT|TPOT' "$OUT/s_$3_c$c.txt" | tr '\n' ' ' | tr -s ' ')"
  done
  kill $pid 2> /dev/null
  wait $pid 2> /dev/null
}
BUDGET=${BUDGET:-400}
for r in 1 2; do
  CLIENTS="256 64" serve_arm llama-2-7b 1 7b_on_r$r
  CLIENTS="256 64" serve_arm llama-2-7b 0 7b_off_r$r
done
serve_arm tinyllama-1.1b 1 tiny_on
serve_arm tinyllama-1.1b 0 tiny_off
echo "total $(( $(date +%s) - T0 )) s"
