#!/usr/bin/env bash
# Thirty-first session: pp512 (-r 5, per repetition) with the side copies on and off, interleaved,
# after the previous call's pp512 with them on came out slow and rising (TinyLlama 34k → 141k).
#   run: command "bash tools/device/session_pp31.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for r in 1 2; do
  for m in tinyllama-1.1b llama-2-7b; do
    for a in 0 1; do
      PERFX_CUDA_ASIDE_COPIES=$a reps "r$r aside=$a" "$B/perfx" "$m" -p 512 -n 0
    done
  done
done
echo "total $(( $(date +%s) - T0 )) s"
