#!/usr/bin/env bash
# Seventeenth session, fifth call (the scheduler of 2c51f34 with step_ids_ allocated at 64 Ki
# entries; the long-step rule of session_async17d.sh dropped): serving A/B on warmed servers.
# Each server first serves 256 clients x 256 requests (not measured: graph captures, buffer
# growth), then 256 clients x 512 requests measured. The first call's overlapped 7B server, whose
# 256-client run came after its 1- and 64-client runs, measured +7.2 %; the later calls' servers,
# measured cold at 256 clients, lost 2-5 % with TTFT p99 ~700 ms.
#   run: command "bash tools/device/session_async17e.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
port=18744
serve_arm() {  # MODEL OVERLAP LABEL
  over_budget && { echo "$3: skipped (budget)"; return; }
  PERFX_DECODE_OVERLAP=$2 "$B/perfx" serve -m "random:$1" --device cuda --port $port --max-batch 256 \
    > "$OUT/serve_$3.log" 2>&1 &
  local pid=$!
  for i in $(seq 1 150); do curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 1; done
  timeout 60 "$B/perfx" bench-serve --url "http://127.0.0.1:$port" --clients 256 --requests 256 \
    --duration 60 --prompt-tokens 128 --max-tokens 128 --temperature 0 > "$OUT/w_$3.txt" 2>&1
  echo "$3 warm-up: $(grep -E 'throughput|TTFT' "$OUT/w_$3.txt" | tr '\n' ' ' | tr -s ' ')"
  timeout 90 "$B/perfx" bench-serve --url "http://127.0.0.1:$port" --clients 256 --requests 512 \
    --duration 60 --prompt-tokens 128 --max-tokens 128 --temperature 0 > "$OUT/s_$3.txt" 2>&1
  echo "$3 c=256: $(grep -E 'throughput|TTFT|TPOT' "$OUT/s_$3.txt" | tr '\n' ' ' | tr -s ' ')"
  kill $pid 2> /dev/null
  wait $pid 2> /dev/null
}
BUDGET=${BUDGET:-200}
for r in 1 2; do
  serve_arm llama-2-7b 1 7b_on_r$r
  serve_arm llama-2-7b 0 7b_off_r$r
done
serve_arm tinyllama-1.1b 1 tiny_on
serve_arm tinyllama-1.1b 0 tiny_off
echo "total $(( $(date +%s) - T0 )) s"
