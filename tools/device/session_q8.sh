#!/usr/bin/env bash
# One device call for the two int8 paths not yet run on a GPU: the CUDA q8_0 KV cache's
# cp.async kernels (tools/device/kv_q8.sh: perplexity, attention kernel tests and benchmark,
# serving 256 clients with each cache type) and OpenCL's int8-activation int4 GEMV
# (tools/device/opencl_nvidia.sh STEPS="check q8a", then 7B-shape decode with and without it).
#   run: command "bash tools/device/session_q8.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
echo "== CUDA q8_0 KV cache"
OUT=$OUT/kv timeout 330 bash tools/device/kv_q8.sh
echo "== OpenCL int8 activations ($(( $(date +%s) - T0 )) s)"
OUT=$OUT/ocl BUILD_DIR=$B STEPS="check q8a" Q8A_MODES="${Q8A_MODES:-ptx khr generic}" \
  timeout 150 bash tools/device/opencl_nvidia.sh 2>&1 | tail -n 25
for q in 0 1; do
  PERFX_OPENCL_ACT_Q8=$q PERFX_OPENCL_PLATFORM=nvidia PERFX_OPENCL_CACHE_DIR=$OUT/ocl/kernel-cache \
    timeout 90 "$B/perfx" bench -m random:llama-2-7b --device opencl -p 0 -n 64 -r 2 > "$OUT/ocl_bench_q8a$q.md" 2>&1
  echo "opencl 7B tg64 act_q8=$q rc=$?: $(grep tg64 "$OUT/ocl_bench_q8a$q.md" | tr -s ' ')"
done
echo "total $(( $(date +%s) - T0 )) s"
