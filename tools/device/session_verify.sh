#!/usr/bin/env bash
# One short device call that checks what changed without a GPU and takes issue 10's batch-1 pair
# in one run: (1) the CUDA conformance suite fp16 / bf16 (its q8_0 KV cases with an aligned q run
# rope_kv's real cache through the tensor-core attention kernels), (2) the OpenCL tests on NVIDIA's
# OpenCL with int8 activations now the default (tools/device/opencl_nvidia.sh STEPS=tests),
# (3) `perfx bench` batch-1 decode (tg128) and one client's TPOT under `perfx serve`, same binary.
#   run: command "bash tools/device/session_verify.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' \
    > "$OUT/conformance_$dt.log" 2>&1
  echo "conformance cuda $dt rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]' "$OUT/conformance_$dt.log" | tr '\n' ' ')"
  grep -E "Failure|error:|^\[  FAILED" "$OUT/conformance_$dt.log" | head -8 | cut -c1-220
done
echo "== OpenCL tests on NVIDIA ($(( $(date +%s) - T0 )) s)"
OUT=$OUT/ocl BUILD_DIR=$B STEPS="tests" timeout 200 bash tools/device/opencl_nvidia.sh 2>&1 | grep -E "^(conformance|conformance_f16|model|opencl_tests) "
echo "== batch-1 decode and one client ($(( $(date +%s) - T0 )) s)"
timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 128 -r 3 > "$OUT/bench7b.md" 2>&1
echo "bench rc=$?: $(grep tg128 "$OUT/bench7b.md" | tr -s ' ')"
CLIENTS=1 OUT=$OUT/serve1 timeout 120 bash tools/device/serve_sweep.sh 2>&1 | grep "serve c="
echo "total $(( $(date +%s) - T0 )) s"
