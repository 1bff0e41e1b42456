#!/usr/bin/env bash
# Thirty-second session, for the acceptance machine (an H200, if the call gets one): tg128 -r 5 on
# TinyLlama, 7B AWQ and 7B GGUF Q4_0, pp512 on TinyLlama and 7B, with the session's binary (the
# bench's 0.25 s warm-up floor, the side copies, cuBLAS dlopened); ~1 min.
#   run: command "bash tools/device/session_h200_32.sh", kind nvidia-h200, carry [".devpack", ".devshared"]
# Not run yet: in the thirty-second session no device came for it (three tries).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for m in tinyllama-1.1b llama-2-7b llama-2-7b:q4_0; do reps "h200-32" "$B/perfx" "$m" -p 0 -n 128; done
for m in tinyllama-1.1b llama-2-7b; do reps "h200-32" "$B/perfx" "$m" -p 512 -n 0; done
echo "total $(( $(date +%s) - T0 )) s"
