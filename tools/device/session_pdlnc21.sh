#!/usr/bin/env bash
# Twenty-first session, call 3 (docs/cuda_linear_notes.md §27): no kernel of the PDL chain reads
# what an earlier kernel wrote through ld.global.nc any more (w4_gemv3's activations, ld_act in
# w4_gemv / w8_gemv / w4_gemv2 / the dense GEMV, __restrict__ dropped from activation, logits and
# KV pointers). Correctness: CUDA conformance fp16 / bf16, model tests (CudaDecodeBits.DecodeRepeats
# and .L2WarmChangesNoLogit among them), memcheck over CudaDecodeBits; then tg128 of this binary
# (perfx) against the committed one (perfx_head, w4_gemv3 on ld.global.nc), interleaved, and 7B
# batch 8.
#   run: command "bash tools/device/session_pdlnc21.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-280}
L=/tmp/p21 && mkdir -p $L
cuda_suite $L
grep -E '^\[ +(OK|FAILED) +\].*CudaDecodeBits' $L/model.log | cut -c1-90
PERFX_TEST_DEVICE=cuda:0 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 "$B/tests/test_model" \
  --gtest_filter='*CudaDecodeBits*cuda*' > $L/mc.log 2>&1
echo "memcheck CudaDecodeBits rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc.log) $(gtest_line $L/mc.log)"
echo "tests $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    tg_line "coherent" "$B/perfx" "random:$m"
    tg_line "nc (HEAD)" "$B/perfx_head" "random:$m"
  done
done
for b in perfx perfx_head; do
  over_budget && continue
  timeout 90 "$B/$b" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 > $L/b8.md 2>&1
  echo "$b 7B batch 8: $(grep tg32 $L/b8.md | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
