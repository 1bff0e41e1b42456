#!/usr/bin/env bash
# Thirty-fourth session: bench/cuda/task_probe.cu (docs/cuda_linear_notes.md §35) — the task
# probe's loader / worker split (one CTA an SM: a loader warp streams every weight task into a
# shared-memory ring by bulk copies and never waits on a dependency; 8 worker warps wait, fold,
# release) against the same call's PDL chain, plus the register-ring task kernel at tasks of 64,
# 256 and 1024 KiB and with a spinning poll (session_task33b.sh's sweep); attention chain 24;
# ~2 min. The probe is packed as .devpack/task_probe
# (nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Ibench/cuda bench/cuda/task_probe.cu).
#   run: command "bash tools/device/session_loader34.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== task size sweep (ring 192 KiB in 16 KiB stages for the loader rows)"
for kib in 64 256 1024; do timeout 100 .devpack/task_probe 9 24 "$kib" 32 | grep -v '^device'; done
echo "== spinning poll, 64 KiB tasks"
timeout 100 .devpack/task_probe 9 24 64 0 | grep -E 'task|loader'
echo "== loader ring / stage sweep (KiB), 64 KiB tasks"
for rs in "96 16" "208 16" "192 32" "192 8" "192 64"; do
  # shellcheck disable=SC2086
  echo "-- ring/stage $rs"; timeout 100 .devpack/task_probe 9 24 64 32 $rs | grep -E 'loader'
done
