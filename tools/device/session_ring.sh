#!/usr/bin/env bash
# w4_gemv3's shared-memory ring (W4Gemv3Config::stages, PERFX_CUDA_W4_STAGES; docs/
# cuda_linear_notes.md §14) on the H200 in one call: the GEMV family's correctness cases (ring
# configurations included), the dispatcher and graph families with the ring forced, memcheck on
# the reduced set, the w4_gemv3 kernel bench (--bench-v3), then 7B / TinyLlama tg128 with the
# register ring (0) and rings of STAGES stages, interleaved, two rounds.
#   run: command "bash tools/device/session_ring.sh", carry [".devpack", ".devshared"]
#   (needs the code of commit fddb2ce: the ring was reverted after this measurement)
#   STAGES="2 3 4" (default), SKIP_KERNELS=1 (only the model benches), BUDGET=seconds (540)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  v3_checks PERFX_CUDA_W4_STAGES=3 "ring 3"
  echo "  ring cases: pass $(grep '^PASS' "$OUT/test_gemv.log" | grep -c /ring) fail $(grep '^FAIL' "$OUT/test_gemv.log" | grep -c /ring)"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_W4_STAGES "0 ${STAGES:-2 3 4}"
echo "total $(( $(date +%s) - T0 )) s"
