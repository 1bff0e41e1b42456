#!/usr/bin/env bash
# Seventeenth session, second call (the binary of session_async17.sh): 1) which server e2e tests
# fail on cuda and why (their failure lines into $OUT; the first call's "concurrent = solo" test
# failed with the overlap off too); 2) more serving rounds at 256 clients (7B, TinyLlama) and one
# client (TinyLlama), overlapped against PERFX_DECODE_OVERLAP=0, arms alternating.
#   run: command "bash tools/device/session_async17b.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
[ -d /work/main ] || { mkdir -p /work && ln -sfn "$ROOT" /work/main; }
E2E='ServeE2E.Overlapped*:ServeE2E.SixtyFour*:ServeE2E.Preemption*'
for ov in 1 0; do
  PERFX_DECODE_OVERLAP=$ov PERFX_TEST_BIN="$B/perfx" PERFX_TEST_SERVE_ARGS="--device cuda" \
    timeout 120 "$B/tests/test_e2e" --gtest_filter="$E2E" > "$OUT/e2e_$ov.log" 2>&1
  echo "server e2e on cuda, overlap=$ov rc=$?: $(gtest_line "$OUT/e2e_$ov.log")"
  grep -E '^\[ +(OK|FAILED) +\]' "$OUT/e2e_$ov.log" | sort -u | head -8
  grep -A4 'Failure' "$OUT/e2e_$ov.log" | grep -E 'Failure|request|Which is' | head -6 | cut -c1-200
done

port=18742
serve_arm() {  # MODEL OVERLAP LABEL
  over_budget && { echo "$3: skipped (budget)"; return; }
  PERFX_DECODE_OVERLAP=$2 "$B/perfx" serve -m "random:$1" --device cuda --port $port --max-batch 256 \
    > "$OUT/serve_$3.log" 2>&1 &
  local pid=$! t=$(date +%s)
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
  serve_arm llama-2-7b 0 7b_off_r$r
  serve_arm llama-2-7b 1 7b_on_r$r
  CLIENTS="1 256" serve_arm tinyllama-1.1b 0 tiny_off_r$r
  CLIENTS="1 256" serve_arm tinyllama-1.1b 1 tiny_on_r$r
done
echo "total $(( $(date +%s) - T0 )) s"
