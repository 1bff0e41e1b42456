#!/usr/bin/env bash
# The ninth session's last device call, on the binary with w4_gemv3's activations two slots ahead
# (docs/cuda_linear_notes.md §17): the GEMV family's cases, the dispatcher and graph families,
# memcheck over the reduced set, the CUDA conformance suite and the CUDA model tests (parity with
# transformers, greedy goldens), then 7B / TinyLlama tg128 and 7B batch 8 once each.
#   run: command "bash tools/device/session_final9.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
T=$B/lin/linear_kernels_test
for fam in gemv auto graph; do
  timeout 60 "$T" --only $fam > "$OUT/test_$fam.log" 2>&1
  kernel_line "$fam" $? "$OUT/test_$fam.log"
done
grep -h '^FAIL' "$OUT"/test_*.log | head -4 | cut -c1-200
timeout 60 "$SAN" --tool memcheck --error-exitcode 3 "$T" --quick --only gemv > "$OUT/memcheck.log" 2>&1
echo "memcheck gemv --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log"))"
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf.log" 2>&1
echo "conformance rc=$?: $(gtest_line "$OUT/conf.log")"
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
echo "model rc=$?: $(gtest_line "$OUT/model.log")"
grep -h -E "Failure|FAILED" "$OUT/conf.log" "$OUT/model.log" | head -6 | cut -c1-220
# one run each at the defaults (PERFX_CUDA_W4A8=0 is the default: ab_tg / ab_b8 need a variable)
ROUNDS=1 ab_tg PERFX_CUDA_W4A8 "0"
ab_b8 PERFX_CUDA_W4A8 "0"
echo "total $(( $(date +%s) - T0 )) s"
