#!/usr/bin/env bash
# w4_gemv3 with 1, 2 or 4 independent mma accumulator chains (W4Gemv3Config::chains,
# PERFX_CUDA_GEMV3_CHAINS; docs/cuda_linear_notes.md §15) on the H200 in one call: the GEMV
# family's correctness cases (chain variants included) and memcheck over the reduced set, the
# w4_gemv3 kernel bench (--bench-v3), then 7B / TinyLlama tg128 per chain count, interleaved, two
# rounds (and 7B batch 8 once per chain count).
#   run: command "bash tools/device/session_chains.sh", carry [".devpack", ".devshared"]
#   (needs the code of the commit that added this script: the chains were reverted after it)
#   CHAINS="2 4" (default), SKIP_KERNELS=1 (only the model benches), BUDGET=seconds (540)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  v3_checks PERFX_CUDA_GEMV3_CHAINS=4 "4 chains"
  case_counts /ch "2 4"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_GEMV3_CHAINS "1 ${CHAINS:-2 4}"
ab_b8 PERFX_CUDA_GEMV3_CHAINS "1 ${CHAINS:-2 4}"
echo "total $(( $(date +%s) - T0 )) s"
