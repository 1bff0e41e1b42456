#!/usr/bin/env bash
# Thirty-first session: on whatever GPU comes (an H200 for the acceptance figures), the 64-stream
# server e2e test on cuda:0 allowing a batched text to leave its solo text only at a near-tie
# (each divergence printed), the other ServeE2E cases on cuda:0, then tg128 -r 5 (per-repetition
# figures) on TinyLlama, 7B AWQ and 7B GGUF Q4_0 with the side copies on and off (§33), pp512 on
# TinyLlama and 7B.
#   run: command "bash tools/device/session_h200_31.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
serve64 "$B/perfx"
for m in tinyllama-1.1b llama-2-7b llama-2-7b:q4_0; do
  for a in 1 0; do
    PERFX_CUDA_ASIDE_COPIES=$a reps "aside=$a" "$B/perfx" "$m" -p 0 -n 128
  done
done
reps "aside=1" "$B/perfx" tinyllama-1.1b -p 512 -n 0
reps "aside=1" "$B/perfx" llama-2-7b -p 512 -n 0
over_budget || {
  PERFX_TEST_SERVE_ARGS="--device cuda" PERFX_TEST_BIN="$B/perfx" timeout 200 \
    "$B/tests/test_e2e" --gtest_filter='ServeE2E.*:-ServeE2E.SixtyFour*:*OpenAI*:*Chromium*' \
    > "$OUT/serve_all.log" 2>&1
  echo "other ServeE2E cases on cuda rc=$?: $(gtest_line "$OUT/serve_all.log")"
  grep -E '^\[  FAILED  \]|Failure' "$OUT/serve_all.log" | head -10 | cut -c1-200
}
echo "total $(( $(date +%s) - T0 )) s"
