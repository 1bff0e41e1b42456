#!/usr/bin/env bash
# Thirty-third session: bench/cuda/task_probe.cu (docs/cuda_linear_notes.md §34) — a task-queue
# persistent kernel with per-slice dependency counters against today's PDL chain, on loads-only
# layers of Llama-2-7B and TinyLlama-1.1B (AWQ W4 g128 byte counts), with and without attention's
# latency chains (24 and 48 dependent loads); ~1 min. The probe is packed as .devpack/task_probe
# (nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Ibench/cuda bench/cuda/task_probe.cu).
#   run: command "bash tools/device/session_task33.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for chain in 24 48; do
  timeout 200 .devpack/task_probe 9 "$chain"
  echo "rc=$? (chain $chain)"
done
