#!/usr/bin/env bash
# Builds the CUDA binaries here (nvcc, no GPU needed) and packs them for a device call:
# .devpack/bin.tar.xz (perfx and perfx_opencl_check with both GPU backends, tests/test_{conformance,
# model,opencl}, the kernel tests; stripped) and
# .devpack/lib (Debian's cpp-httplib + brotli, which the GPU machine lacks). Both folders are
# ignored by git (.git/info/exclude). Then: run tools/device/cuda_check.sh there, carrying
# .devpack and .devshared (a copy of ../shared/models/stories260K*).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFX_CUDA=ON -DPERFX_OPENCL=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DPERFX_BUILD_BENCH=OFF > /dev/null
cmake --build build-cuda -j"$(nproc)" --target perfx perfx_opencl_check test_conformance test_model test_opencl
BUILD_DIR=$PWD/.devbin/lin bash tools/device/cuda_linear_kernels.sh --build-only
BUILD_DIR=$PWD/.devbin/attn OUT=/tmp/attn_out bash tools/device/cuda_attention_kernels.sh --build-only
mkdir -p .devbin/tests
cp build-cuda/perfx build-cuda/perfx_opencl_check .devbin/
cp build-cuda/tests/test_conformance build-cuda/tests/test_model build-cuda/tests/test_opencl .devbin/tests/
rm -f .devbin/lin/*.o .devbin/lin/*.log .devbin/attn/*.o .devbin/attn/*.log .devbin/test_*
strip .devbin/perfx .devbin/perfx_opencl_check .devbin/tests/* .devbin/lin/linear_kernels_test \
  .devbin/attn/attention_kernels_test
mkdir -p .devpack/lib .devshared/models
tar -cJf .devpack/bin.tar.xz .devbin
for l in libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1; do
  cp -L /usr/lib/x86_64-linux-gnu/$l .devpack/lib/
done
SHARED=${PERFX_SHARED_DIR:-../shared}
cp -r "$SHARED/models/stories260K-hf" "$SHARED/models/stories260K" .devshared/models/
du -sh .devpack .devshared
