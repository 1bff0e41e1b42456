#!/usr/bin/env bash
# One device call (2026-12-01, fifth session): the CUDA backend's dequantized weight copies
# (PERFX_CUDA_DENSE_WEIGHTS) checked and measured, then the OpenCL GEMV's load-only probe grid.
#   1. cuda_check.sh STEPS="conformance model" (conformance also with the copies off);
#   2. batch_sweep.sh MODES="default nodense" BATCHES=64,128,256 (7B AWQ batched decode, tok/s);
#   3. perfx bench pp512 on the 7B shape with and without the copies;
#   4. opencl_nvidia.sh STEPS="check sweep" with SWEEP_OPTS=-DGEMV_PROBE over lanes x U x shapes.
#   run: command "bash tools/device/session_dense_ocl.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/perfx_out}
mkdir -p "$OUT"
STEPS="conformance model" BUDGET=150 OUT="$OUT" bash tools/device/cuda_check.sh 2>&1 | sed -n '/SUMMARY/,$p'
OUT="$OUT/batch" MODES="default nodense" BATCHES=64,128,256 bash tools/device/batch_sweep.sh
P=/tmp/devbin/.devbin/perfx
export LD_LIBRARY_PATH="$PWD/.devpack/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for m in auto 0; do
  PERFX_CUDA_DENSE_WEIGHTS=$m timeout 150 "$P" bench --device cuda -m random:llama-2-7b -p 512 -n 0 -r 3 \
    > "$OUT/pp_$m.md" 2>&1
  echo "pp512 7B dense copies $m rc=$?: $(grep -E '\| pp' "$OUT/pp_$m.md" | awk -F'|' '{printf "%s %s;", $7, $8}')"
done
OUT="$OUT/ocl" BUILD_DIR=/tmp/devbin/.devbin STEPS="check sweep" SWEEP_OPTS=-DGEMV_PROBE \
  SWEEP_LANES="16 32" SWEEP_U="1 2 4 8" SWEEP_SHAPES="4x1g 4x2g 4x4g 4x8g 8x4g" \
  SWEEP_EXTRA=$'32 1 4x8g\n16 1 4x8g\n32 2 2x8g' timeout 200 bash tools/device/opencl_nvidia.sh 2>&1 |
  sed -n '/===== OpenCL/,/^build/p'
grep -h "copy kernel moving" "$OUT/ocl/bandwidth.log"
