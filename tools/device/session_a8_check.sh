#!/usr/bin/env bash
# W4A8 (PERFX_CUDA_W4A8=1) on the session's final binary: the conformance linears with w4_gemv3
# forced (now with a group-64 case it takes) and compute-sanitizer memcheck over them.
#   run: command "bash tools/device/session_a8_check.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
export PERFX_CUDA_W4A8=1 PERFX_CUDA_W4_GEMV=v3 PERFX_TEST_DEVICE=cuda:0
timeout 100 "$B/tests/test_conformance" --gtest_filter='*Linear*cuda*' > "$OUT/conf.log" 2>&1
echo "conformance linears W4A8 rc=$?: $(gtest_line "$OUT/conf.log")"
grep -E "Failure|FAILED" "$OUT/conf.log" | head -6 | cut -c1-220
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 140 "$SAN" --tool memcheck --error-exitcode 3 "$B/tests/test_conformance" \
  --gtest_filter='*Linear*cuda*' > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"
