#!/usr/bin/env bash
# Thirty-fourth session, third task_probe call (docs/cuda_linear_notes.md §35), after the review
# of the second: the task and loader kernels' "bare" rows (no dependency waits, no activation row,
# no arrival a task: only the tiling's streaming) at 64, 256 and 1024 KiB tasks, the loader in 32
# and 64 KiB stages, and persistent_probe's rows (its one-kernel `stream` ceiling and the chain)
# on the same GPU; attention chain 24; ~1 min. Both probes packed in .devpack
# (nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Ibench/cuda bench/cuda/X.cu).
#   run: command "bash tools/device/session_loader34c.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 .devpack/persistent_probe 9 24 | grep -v '^device'
for kib in 64 256 1024; do
  echo "-- tasks $kib KiB, loader stages 32 KiB"
  timeout 100 .devpack/task_probe 9 24 "$kib" 32 192 32 | grep -v '^device' | grep -v 'full'
done
echo "-- tasks 256 KiB, loader stages 64 KiB"
timeout 100 .devpack/task_probe 9 24 256 32 192 64 | grep -E 'loader'
