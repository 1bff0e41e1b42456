#!/usr/bin/env bash
# Twenty-first session, last call (docs/cuda_linear_notes.md §27): w4_gemv3's W4A8 loads of the
# int8 activations and their group records without .nc. With PERFX_CUDA_W4A8=1: CUDA conformance
# fp16 / bf16, model tests (CudaDecodeBits.DecodeRepeats: one engine's decode bit for bit over
# runs), memcheck over CudaDecodeBits; then the same suite with W4A8 off (the default).
#   run: command "bash tools/device/session_w4a8nc21.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
L=/tmp/a21 && mkdir -p $L/w4a8 $L/default
echo "== PERFX_CUDA_W4A8=1"
PERFX_CUDA_W4A8=1 cuda_suite $L/w4a8
grep -E '^\[ +(OK|FAILED) +\].*CudaDecodeBits' $L/w4a8/model.log | cut -c1-90
PERFX_CUDA_W4A8=1 PERFX_TEST_DEVICE=cuda:0 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 \
  "$B/tests/test_model" --gtest_filter='*CudaDecodeBits*cuda*' > $L/mc.log 2>&1
echo "memcheck CudaDecodeBits (W4A8) rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc.log) $(gtest_line $L/mc.log)"
echo "== default"
cuda_suite $L/default
echo "total $(( $(date +%s) - T0 )) s"
