#!/usr/bin/env bash
# Thirty-fourth session, fifth task_probe call (docs/cuda_linear_notes.md §35): `persist loader`
# — one cooperative kernel on the chain's tiling with the loader / worker split and grid-wide
# counters where the chain has kernel boundaries — against the same call's chain, at rings of
# 192, 224 and 96 KiB in 32 KiB stages; attention chains of 24 and 48 loads; ~1 min. Packed as
# session_loader34c.sh says.
#   run: command "bash tools/device/session_loader34e.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader
for chain in 24 48; do
  for ring in 192 224 96; do
    echo "-- attention chain $chain, ring $ring KiB in 32 KiB stages"
    timeout 100 .devpack/task_probe 9 "$chain" 64 32 "$ring" 32 | grep -E 'chain:|persist'
  done
done
