#!/usr/bin/env bash
# Thirty-fourth session, sixth task_probe call (docs/cuda_linear_notes.md §35): the chain loader
# and the persist loader with each CTA's share of a matrix contiguous (argument 7 = 0) and
# interleaved over the grid in 32 KiB chunks (= 1), against the same call's chain; ring 192 KiB;
# attention chain 24; ~30 s. Packed as session_loader34c.sh says.
#   run: command "bash tools/device/session_loader34f.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader
for il in 0 1 0 1; do
  echo "-- interleave $il"
  timeout 100 .devpack/task_probe 9 24 64 32 192 32 "$il" | grep -E 'chain|persist'
done
