#!/usr/bin/env bash
# Thirty-third session, second task_probe call: what a task costs by itself — the same probe at
# tasks of ~64, 256 and 1024 KiB, and at 64 KiB with the poll spinning (no back-off); attention
# chain 24; ~1 min. Not run in the thirty-third session (no device came for it; the session's
# device time ran out).
#   run: command "bash tools/device/session_task33b.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader
for kib in 64 256 1024; do timeout 100 .devpack/task_probe 9 24 "$kib" 32 | grep -v '^device'; done
timeout 100 .devpack/task_probe 9 24 64 0 | grep -E 'task'
