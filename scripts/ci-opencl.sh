#!/usr/bin/env bash
# The OpenCL step of CI (.ci/run), runnable on its own: builds only what the OpenCL tests need
# with -DPERFX_OPENCL=ON, runs them for real on PoCL (the CPU as an OpenCL device) in fp32 and fp16
# activations, then cross-compiles the backend and its self-check for aarch64.
# A test that skips because the OpenCL device is missing fails this step.
# PERFX_OPENCL_BUILD_DIR (default build-ocl): .ci/run passes its release build folder, where
# turning the option on recompiles only perfx_backend (the OpenCL definitions are private to it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-opencl-deps.sh --cross
t0=$(date +%s)
# Fresh kernel caches: CI measures (and pays) the cold build of every kernel.
cache=$(mktemp -d)
export PERFX_OPENCL_CACHE_DIR=$cache/perfx POCL_CACHE_DIR=$cache/pocl
export PERFX_TEST_DEVICE=opencl PERFX_REQUIRE_OPENCL=1

B=${PERFX_OPENCL_BUILD_DIR:-build-ocl}
if [ -f "$B/CMakeCache.txt" ]; then
  cmake -B "$B" -DPERFX_OPENCL=ON
else
  cmake -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFX_OPENCL=ON -DPERFX_BUILD_BENCH=OFF
fi
cmake --build "$B" -j2 --target perfx perfx_opencl_check test_conformance test_model test_opencl
t_build=$(date +%s)

# Runs a gtest binary; fails on a failure or a skipped test (a skip means no device).
gtest() {
  local log
  log=$(mktemp)
  "$@" 2>&1 | tee "$log" | grep -E '^\[  (FAILED|SKIPPED|PASSED) |^perfx|max \|dlogit\|' || true
  if grep -q '^\[  FAILED  \]' "$log" || grep -q '^\[  SKIPPED \]' "$log" ||
     ! grep -q '^\[  PASSED  \]' "$log"; then
    echo "FAILED (or skipped): $*"
    exit 1
  fi
}
"$B"/perfx_opencl_check
for dtype in f32 f16; do
  echo "== OpenCL on PoCL, $dtype activations"
  export PERFX_OPENCL_DTYPE=$dtype
  gtest "$B"/tests/test_conformance --gtest_filter='*opencl*'
  gtest "$B"/tests/test_model --gtest_filter='*opencl*'
done
unset PERFX_OPENCL_DTYPE
echo "== forced split-K attention and the sub-group attempt (PoCL rejects it: the fallback is tested)"
PERFX_OPENCL_SUBGROUPS=1 PERFX_OPENCL_ATTN_SPLIT=64 gtest "$B"/tests/test_conformance --gtest_filter='*opencl*'
PERFX_OPENCL_SUBGROUPS=1 PERFX_OPENCL_ATTN_SPLIT=64 gtest "$B"/tests/test_model --gtest_filter='*GreedyOnDevice*opencl*'
echo "== the int4 GEMV on activations in their dtype (PERFX_OPENCL_ACT_Q8=0; the default above is int8)"
PERFX_OPENCL_ACT_Q8=0 gtest "$B"/tests/test_conformance --gtest_filter='*Linear*opencl*'
gtest "$B"/tests/test_opencl
t_test=$(date +%s)

echo "== ARM64 cross build (backend + self-check)"
cmake -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DPERFX_BACKEND_ONLY=ON -DPERFX_OPENCL=ON
cmake --build build-arm64 -j2
file build-arm64/perfx_opencl_check 2>/dev/null || true
t_end=$(date +%s)
rm -rf "$cache"
echo "OpenCL CI step: build $((t_build - t0)) s, tests $((t_test - t_build)) s, arm64 $((t_end - t_test)) s, total $((t_end - t0)) s"
