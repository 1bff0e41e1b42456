#!/usr/bin/env bash
# Thirty-first session, meant for an H200 (the acceptance machine; the call that ran it got an H100,
# as a kind without needs_h200 may): tg128 -r 5 on TinyLlama, 7B AWQ and 7B GGUF Q4_0, pp512 on
# TinyLlama and 7B, with the session's binary (side copies, bench warm-up floor); ~50 s.
#   run: command "bash tools/device/session_h200_31b.sh", kind nvidia-h200, carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
acceptance_reps final
echo "total $(( $(date +%s) - T0 )) s"
