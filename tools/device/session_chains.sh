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
T=$B/lin/linear_kernels_test
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  timeout 90 "$T" --only gemv > "$OUT/test_gemv.log" 2>&1
  kernel_line gemv $? "$OUT/test_gemv.log"
  for c in 2 4; do
    echo "  ch$c cases: pass $(grep '^PASS' "$OUT/test_gemv.log" | grep -c "/ch$c ") fail $(grep '^FAIL' "$OUT/test_gemv.log" | grep -c "/ch$c ")"
  done
  grep '^FAIL' "$OUT/test_gemv.log" | head -6 | cut -c1-200
  awk '/^PASS/ && / w4_gemv3/ { for (i = 1; i <= NF; ++i) if ($i == "rel") { v = $(i+1) + 0; k = ($2 ~ /ch1/) ? "ch1" : "ch2/4"; if (v > m[k]) m[k] = v } }
    END { printf "w4_gemv3 max rel err: ch1 %.2e  ch2/4 %.2e\n", m["ch1"], m["ch2/4"] }' "$OUT/test_gemv.log"
  for fam in auto graph; do
    PERFX_CUDA_W4_GEMV=v3 PERFX_CUDA_GEMV3_CHAINS=4 timeout 60 "$T" --only $fam > "$OUT/test_${fam}_ch4.log" 2>&1
    kernel_line "$fam (v3, 4 chains)" $? "$OUT/test_${fam}_ch4.log"
  done
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$T" --quick --only gemv \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck gemv --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log"))"
  grep -h -E "^w4_gemv3" "$OUT/test_gemv.log" | head -8
  timeout 150 "$T" --bench-v3 > "$OUT/bench_v3.log" 2>&1
  echo "bench rc=$?"
  grep -m1 "device-to-device" "$OUT/bench_v3.log"
  sed -n '/^== w4_gemv3/,/^$/p' "$OUT/bench_v3.log"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_GEMV3_CHAINS "1 ${CHAINS:-2 4}"
ab_b8 PERFX_CUDA_GEMV3_CHAINS "1 ${CHAINS:-2 4}"
echo "total $(( $(date +%s) - T0 )) s"
