#!/usr/bin/env bash
# Builds perfx with the kernel trace (-DPERFX_CUDA_TRACE=ON, build-trace/, sm_90a) and packs it as
# .devpack/trace.tar.xz (perfx_trace) for tools/device/session_trace12.sh. Run
# tools/device/pack_cuda_bins.sh too: the device scripts take the libraries from .devpack/lib.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFX_CUDA=ON -DPERFX_CUDA_TRACE=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DPERFX_BUILD_BENCH=OFF -DPERFX_BUILD_TESTS=OFF > /dev/null
cmake --build build-trace -j"$(nproc)" --target perfx
mkdir -p .devpack /tmp/pack_trace
cp build-trace/perfx /tmp/pack_trace/perfx_trace
strip /tmp/pack_trace/perfx_trace
tar -cJf .devpack/trace.tar.xz -C /tmp/pack_trace perfx_trace
ls -la .devpack/trace.tar.xz
