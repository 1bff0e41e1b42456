#!/usr/bin/env bash
# The CUDA step of CI (.ci/run): turns -DPERFX_CUDA=ON in an existing build folder (only
# perfx_backend recompiles; everything linking it relinks), builds every target and runs the whole
# suite again. Without a GPU the CUDA instances of the conformance, parity and greedy tests skip
# with a message; everything else must pass. Usage: scripts/ci-cuda.sh [BUILD_DIR] (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
  echo "ci-cuda: nvcc not found (PATH or /usr/local/cuda/bin): the CUDA backend cannot be compiled" >&2
  exit 1
fi
t0=$(date +%s)
cmake -B "$B" -DPERFX_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" > /dev/null
cmake --build "$B" -j2
t1=$(date +%s)
PERFX_TEST_DEVICE=cuda:0 ctest --test-dir "$B" --output-on-failure -j2
echo "ci-cuda: build $((t1 - t0)) s, tests $(($(date +%s) - t1)) s"
