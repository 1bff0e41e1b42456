#!/usr/bin/env bash
# Short diagnosis call: (1) why tests/opencl's CommandLineErrorsAreOneLine saw only PoCL in its
# perfx child processes on the GPU machine (the compute mode; the same perfx commands with no other
# process holding the GPU; the test alone and with the whole binary); (2) compute-sanitizer memcheck
# over the CUDA attention conformance cases (the q8_0 cache's cp.async staging included).
#   run: command "bash tools/device/session_diag.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
export PERFX_OPENCL_CACHE_DIR=$OUT/oclcache
nvidia-smi --query-gpu=name,compute_mode --format=csv,noheader
for dev in opencl opencl:7; do
  PERFX_OPENCL_PLATFORM=nvidia timeout 60 "$B/perfx" run -p hi -n 2 --temp 0 --device $dev > /dev/null 2> "$OUT/alone.err"
  echo "alone: --device $dev rc=$?: $(head -c 300 "$OUT/alone.err")"
done
export PERFX_OPENCL_PLATFORM=nvidia PERFX_TEST_DEVICE=opencl PERFX_REQUIRE_OPENCL=1 PERFX_TEST_BIN=$B/perfx
timeout 120 "$B/tests/test_opencl" --gtest_filter='OpenClErrors.CommandLine*' > "$OUT/cmdline_alone.log" 2>&1
echo "test alone rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cmdline_alone.log" | tr '\n' ' ') $(grep -m2 'perfx: error' "$OUT/cmdline_alone.log" | tr '\n' ' ' | cut -c1-300)"
unset PERFX_OPENCL_PLATFORM PERFX_TEST_DEVICE PERFX_REQUIRE_OPENCL
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
PERFX_TEST_DEVICE=cuda:0 PERFX_CUDA_GRAPHS=0 timeout 240 "$SAN" --tool memcheck --error-exitcode 3 \
  "$B/tests/test_conformance" --gtest_filter='*Attention*cuda*:*Rope*cuda*' > "$OUT/memcheck_attn.log" 2>&1
echo "memcheck attention/rope conformance rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck_attn.log") $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck_attn.log" | tr '\n' ' ')"
grep -m6 -E "Invalid|out of bounds|Program hit" "$OUT/memcheck_attn.log" | cut -c1-200
echo "total $(( $(date +%s) - T0 )) s"
