#!/usr/bin/env bash
# Twenty-ninth session: the weights' L2 policy (docs/cuda_linear_notes.md §31). w4_gemv3's weight
# and record loads carry an L2 cache policy (createpolicy): evict-normal (PERFX_CUDA_L2_EVICT_FIRST=0,
# the default when this ran) or evict-first (=1, the default since), so that a step's 3.4 GB of weights
# stop pushing the KV cache (TinyLlama 2.8 MB, 7B up to 64 MB at tg128), the activations and the
# norms' gamma out of L2. Arms, interleaved, two rounds: "base" (the binary of HEAD before the
# change, .devbin/perfx_base), "ef0" and "ef1" (this change's binary, the policy normal / first) on
# 7B AWQ, TinyLlama AWQ and 7B GGUF Q4_0 tg128; then 7B batch 8 (tg32 x 8) ef0 / ef1; the CUDA
# conformance suite (fp16) and model tests with ef1.
#   run: command "bash tools/device/session_evict29.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# arm LABEL BINARY EF MODEL: one tg128 (-r 3), "LABEL MODEL: t/s ± sd".
arm() { BIN=$2 bench_arm "$1 $4" "PERFX_CUDA_L2_EVICT_FIRST=$3" "$4" tg128 -p 0 -n 128 -r 3; }
for r in 1 2; do
  for m in llama-2-7b tinyllama-1.1b llama-2-7b:q4_0; do
    arm "r$r base" "$B/perfx_base" 0 "$m"
    arm "r$r ef0 " "$B/perfx" 0 "$m"
    arm "r$r ef1 " "$B/perfx" 1 "$m"
  done
done
for ef in 0 1; do
  over_budget && continue
  PERFX_CUDA_L2_EVICT_FIRST=$ef timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda \
    -p 0 -n 32 -B 8 -r 2 > /tmp/b8.md 2>&1
  echo "7B batch 8 ef$ef: $(grep -E 'tg32' /tmp/b8.md | awk -F'|' '{print $(NF-1)}')"
done
PERFX_CUDA_L2_EVICT_FIRST=1 PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
  --gtest_filter='*cuda*' > "$OUT/conf_f16.log" 2>&1
echo "conformance f16 ef1 rc=$?: $(gtest_line "$OUT/conf_f16.log")"
PERFX_CUDA_L2_EVICT_FIRST=1 PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" \
  --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
echo "model tests ef1 rc=$?: $(gtest_line "$OUT/model.log")"
echo "total $(( $(date +%s) - T0 )) s"
