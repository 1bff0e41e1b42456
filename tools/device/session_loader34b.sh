#!/usr/bin/env bash
# Thirty-fourth session, second task_probe call (docs/cuda_linear_notes.md §35): the controls the
# first call lacked — the task and loader kernels with no dependency waits ("none": each
# schedule's streaming ceiling) beside their sliced rows and the chain, at 64 and 256 KiB tasks,
# the loader in 32 KiB stages (the first call's best); attention chain 24; ~30 s.
#   run: command "bash tools/device/session_loader34b.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader
for kib in 64 256; do timeout 100 .devpack/task_probe 9 24 "$kib" 32 192 32 | grep -v '^device'; done
