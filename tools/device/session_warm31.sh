#!/usr/bin/env bash
# Thirty-first session: bench's warm-up now repeats until it has taken 0.25 s (kWarmupFloorNs),
# after pp512 on TinyLlama showed timed repetitions rising from 34k to 141k tok/s behind a single
# 3 ms warm-up. pp512 and tg128 (-r 5, per repetition), TinyLlama and 7B AWQ, two rounds; the side
# copies on (default) and, for pp512, off.
#   run: command "bash tools/device/session_warm31.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for r in 1 2; do
  for m in tinyllama-1.1b llama-2-7b; do
    for a in 1 0; do
      PERFX_CUDA_ASIDE_COPIES=$a reps "r$r aside=$a" "$B/perfx" "$m" -p 512 -n 0
    done
    reps "r$r aside=1" "$B/perfx" "$m" -p 0 -n 128
  done
done
echo "total $(( $(date +%s) - T0 )) s"
