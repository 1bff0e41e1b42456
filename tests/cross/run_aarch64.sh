#!/usr/bin/env bash
# The CPU kernel tests on ARM64: cross-compiles the int8-activation linear and attention kernels
# (src/backend/cpu: qlinear.cpp + qlinear_neon.cpp, attention.cpp and what they use) with their
# unit tests (tests/unit/backend/{qlinear,attention}_test.cpp, on the GoogleTest subset of
# tests/cross/gtest) using g++-aarch64-linux-gnu, and runs them under qemu-aarch64: once on a CPU
# with the dot-product extension (sdot path) and once with it turned off (vmull path).
# Installs the two Debian packages when missing (root or sudo). Usage: tests/cross/run_aarch64.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in g++-aarch64-linux-gnu qemu-user; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
out="${CROSS_BUILD_DIR:-build-aarch64}"
mkdir -p "$out"
srcs=(src/backend/cpu/qlinear.cpp src/backend/cpu/qlinear_neon.cpp src/backend/cpu/attention.cpp
      src/backend/cpu/reference.cpp src/backend/cpu/x86_avx2.cpp src/core/dtype.cpp
      src/core/quantized.cpp src/core/tensor.cpp
      tests/unit/backend/qlinear_test.cpp tests/unit/backend/attention_test.cpp
      tests/cross/cross_main.cpp)
# -march=armv8-a: the baseline; sdot is chosen at run time (getauxval).
aarch64-linux-gnu-g++ -std=c++20 -O2 -Wall -Wextra -Werror -march=armv8-a -Itests/cross -Itests \
  -Isrc -Iinclude "${srcs[@]}" -o "$out/kernel_tests" -static
echo "== qemu-aarch64 -cpu max (dot product)"
qemu-aarch64 -cpu max "$out/kernel_tests"
echo "== qemu-aarch64 -cpu max, PERFX_NEON_DOTPROD=0 (vmull path)"
PERFX_NEON_DOTPROD=0 qemu-aarch64 -cpu max "$out/kernel_tests"
