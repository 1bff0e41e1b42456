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
T=$B/lin/linear_kernels_test
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  timeout 90 "$T" --only gemv > "$OUT/test_gemv.log" 2>&1
  kernel_line gemv $? "$OUT/test_gemv.log"
  echo "  ring cases: pass $(grep '^PASS' "$OUT/test_gemv.log" | grep -c /ring) fail $(grep '^FAIL' "$OUT/test_gemv.log" | grep -c /ring)"
  grep '^FAIL' "$OUT/test_gemv.log" | head -6 | cut -c1-200
  for fam in auto graph; do
    PERFX_CUDA_W4_GEMV=v3 PERFX_CUDA_W4_STAGES=3 timeout 60 "$T" --only $fam > "$OUT/test_${fam}_ring.log" 2>&1
    kernel_line "$fam (v3, ring 3)" $? "$OUT/test_${fam}_ring.log"
  done
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$T" --quick --only gemv \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck gemv --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")); ring pass $(grep '^PASS' "$OUT/memcheck.log" | grep -c /ring)"
  grep -h -E "^w4_gemv3" "$OUT/test_gemv.log" | head -8
  timeout 150 "$T" --bench-v3 > "$OUT/bench_v3.log" 2>&1
  echo "bench rc=$?"
  grep -m1 "device-to-device" "$OUT/bench_v3.log"
  sed -n '/^== w4_gemv3/,/^$/p' "$OUT/bench_v3.log"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_W4_STAGES "0 ${STAGES:-2 3 4}"
echo "total $(( $(date +%s) - T0 )) s"
