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
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  v3_checks PERFX_CUDA_GEMV3_EXP=3 "exp 3"
  case_counts /exp "1 2 3"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_GEMV3_EXP "0 ${EXPS:-1 2 3}"
ab_b8 PERFX_CUDA_GEMV3_EXP "0 ${EXPS:-1 2 3}"
echo "total $(( $(date +%s) - T0 )) s"
