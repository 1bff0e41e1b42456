#!/usr/bin/env bash
# Thirtieth session, first call: w4_gemv3's first batch split around the PDL wait
# (PERFX_CUDA_GEMV3_PREWAIT=N: N ring slots before the wait, the rest after; cuda_linear_notes.md
# §32), the measurement the twenty-ninth session could not make. .devbin/perfx is dc23d45 with
# 8aafb59's knob applied, .devbin/perfx_base is dc23d45 (the kernels of HEAD: nothing under
# src/backend/cuda changed since but comments and the knob's revert). Arms interleaved, two rounds:
# tg128 (-r 3) on 7B AWQ and TinyLlama AWQ at N = 8 (the whole ring, the former default), 4 and 0,
# and the base binary; then one round of 7B GGUF Q4_0 at 8 / 4 and the base (the knob's build
# spills 12 bytes more in the symmetric instance); the CUDA conformance suite (fp16) at N = 4.
#   run: command "bash tools/device/session_prewait30.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-440}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# arm LABEL BINARY PREWAIT MODEL: one tg128 (-r 3), "LABEL MODEL: t/s ± sd".
arm() { BIN=$2 bench_arm "$1 $4" "PERFX_CUDA_GEMV3_PREWAIT=$3" "$4" tg128 -p 0 -n 128 -r 3; }
for r in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    arm "r$r base " "$B/perfx_base" 8 "$m"
    arm "r$r pre8 " "$B/perfx" 8 "$m"
    arm "r$r pre4 " "$B/perfx" 4 "$m"
    arm "r$r pre0 " "$B/perfx" 0 "$m"
  done
done
arm "q4 base " "$B/perfx_base" 8 llama-2-7b:q4_0
arm "q4 pre8 " "$B/perfx" 8 llama-2-7b:q4_0
arm "q4 pre4 " "$B/perfx" 4 llama-2-7b:q4_0
if ! over_budget; then
  PERFX_CUDA_GEMV3_PREWAIT=4 PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
    --gtest_filter='*cuda*' > "$OUT/conf_f16.log" 2>&1
  echo "conformance f16 pre4 rc=$?: $(gtest_line "$OUT/conf_f16.log")"
fi
echo "total $(( $(date +%s) - T0 )) s"
