#!/usr/bin/env bash
# Thirty-fourth session, fourth task_probe call (docs/cuda_linear_notes.md §35): the chain itself
# with each loads-only GEMV on the loader / worker split (`chain loader`: one CTA an SM streams
# its contiguous share into a shared-memory ring by bulk copies from the kernel's start, before
# its PDL wait) against the same call's register-ring chain, at rings of 192, 96 and 64 KiB (at
# 96 and 64 two or three GEMVs' CTAs fit an SM at once, so the next GEMV's loader can stream
# under its predecessor's tail); attention chain 24; ~1 min. Packed as session_loader34c.sh says.
#   run: command "bash tools/device/session_loader34d.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader
for rs in "192 32" "96 32" "96 16" "64 16" "64 32"; do
  echo "-- ring/stage $rs KiB"
  # shellcheck disable=SC2086
  timeout 100 .devpack/task_probe 9 24 64 32 $rs | grep -E 'chain'
done
