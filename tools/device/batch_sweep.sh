#!/usr/bin/env bash
# Batched decode at serving sizes (issue 10): perfx bench tg with BATCHES (default 64,128,256)
# sequences on random:llama-2-7b (AWQ W4 g128) under each of MODES (default "default fused"):
# default = the W4 ladder as built; fused = the fused W4 GEMM at every M
# (PERFX_CUDA_W4_DENSE_MIN_M=100000); denseN = the dense rung from M = N; nodense = the dense rung
# dequantizing on every call (PERFX_CUDA_DENSE_WEIGHTS=0, no dequantized copies). One device call;
# binaries from tools/device/pack_cuda_bins.sh.
#   run: command "bash tools/device/batch_sweep.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/batch_sweep}
mkdir -p "$OUT"
. tools/device/devbin.sh
P=$B/perfx
N=${N:-32}
for mode in ${MODES:-default fused}; do
  env_min=""
  [ "$mode" = fused ] && env_min="PERFX_CUDA_W4_DENSE_MIN_M=100000"
  [[ "$mode" == dense* ]] && env_min="PERFX_CUDA_W4_DENSE_MIN_M=${mode#dense}"
  [ "$mode" = nodense ] && env_min="PERFX_CUDA_DENSE_WEIGHTS=0"
  env $env_min PERFX_CUDA_LINEAR_LOG=1 timeout 200 "$P" bench --device cuda -m random:llama-2-7b -p 0 \
    -n "$N" -B "${BATCHES:-64,128,256}" -r 2 > "$OUT/sweep_$mode.md" 2> "$OUT/sweep_$mode.err"
  echo "$mode rc=$?: $(grep -E '\| tg' "$OUT/sweep_$mode.md" | awk -F'|' '{printf "%s %s;", $7, $8}')"
done
