#!/usr/bin/env bash
# What separates w4_gemv3 from its loads-only probe (docs/cuda_linear_notes.md §16), on the H200
# in one call: the GEMV family's correctness cases (experiment bits included) and memcheck over the
# reduced set; the w4_gemv3 kernel bench (--bench-v3) with the probe loading records and
# activations too (probe-full, probe-full2 = + the activation prefetch) and the kernel with
# records as streamed loads (exp1), an L1 prefetch of the activations (exp2) or both (exp3); then
# 7B / TinyLlama tg128 per PERFX_CUDA_GEMV3_EXP, interleaved, two rounds, and 7B batch 8.
#   run: command "bash tools/device/session_gap.sh", carry [".devpack", ".devshared"]
#   (needs the code of the commit that added this script: the experiment was reverted after it)
#   EXPS="1 2 3" (default), SKIP_KERNELS=1 (only the model benches), BUDGET=seconds (540)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
T=$B/lin/linear_kernels_test
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  timeout 90 "$T" --only gemv > "$OUT/test_gemv.log" 2>&1
  kernel_line gemv $? "$OUT/test_gemv.log"
  for e in 1 2 3; do
    echo "  exp$e cases: pass $(grep '^PASS' "$OUT/test_gemv.log" | grep -c "/exp$e ") fail $(grep '^FAIL' "$OUT/test_gemv.log" | grep -c "/exp$e ")"
  done
  grep '^FAIL' "$OUT/test_gemv.log" | head -6 | cut -c1-200
  for fam in auto graph; do
    PERFX_CUDA_W4_GEMV=v3 PERFX_CUDA_GEMV3_EXP=3 timeout 60 "$T" --only $fam > "$OUT/test_${fam}_exp3.log" 2>&1
    kernel_line "$fam (v3, exp 3)" $? "$OUT/test_${fam}_exp3.log"
  done
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$T" --quick --only gemv \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck gemv --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log"))"
  timeout 150 "$T" --bench-v3 > "$OUT/bench_v3.log" 2>&1
  echo "bench rc=$?"
  grep -m1 "device-to-device" "$OUT/bench_v3.log"
  sed -n '/^== w4_gemv3/,/^$/p' "$OUT/bench_v3.log"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_GEMV3_EXP "0 ${EXPS:-1 2 3}"
ab_b8 PERFX_CUDA_GEMV3_EXP "0 ${EXPS:-1 2 3}"
echo "total $(( $(date +%s) - T0 )) s"
