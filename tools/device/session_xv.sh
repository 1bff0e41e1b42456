#!/usr/bin/env bash
# w4_gemv3 with the activations a full slot ahead (W4Gemv3Config::xv, PERFX_CUDA_GEMV3_XV;
# docs/cuda_linear_notes.md §17) on the H200 in one call: the GEMV family's correctness cases (xv
# cases included) and memcheck over the reduced set, the dispatcher and graph families with xv 2
# forced, the w4_gemv3 kernel bench (--bench-v3), then 7B / TinyLlama tg128 per xv, interleaved,
# two rounds, and 7B batch 8.
#   run: command "bash tools/device/session_xv.sh", carry [".devpack", ".devshared"]
#   (needs the code of commit 87c2a55: the next commit kept xv 1 as the only form)
#   EXPS="1 2" (default), SKIP_KERNELS=1 (only the model benches), BUDGET=seconds (540)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  v3_checks PERFX_CUDA_GEMV3_XV=2 "xv 2"
  case_counts /xv "1 2"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_GEMV3_XV "0 ${EXPS:-1 2}"
ab_b8 PERFX_CUDA_GEMV3_XV "0 ${EXPS:-1 2}"
echo "total $(( $(date +%s) - T0 )) s"
