#!/usr/bin/env bash
# Thirty-first session: pp512 with the side copies on and off (-r 5, per repetition), three more
# interleaved rounds on 7B AWQ (the previous call: 39,582 / 39,734 on vs 39,925 / 40,200 off).
#   run: command "bash tools/device/session_pp31b.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for r in 1 2 3; do
  for a in 0 1; do
    PERFX_CUDA_ASIDE_COPIES=$a reps "r$r aside=$a" "$B/perfx" llama-2-7b -p 512 -n 0
  done
done
echo "total $(( $(date +%s) - T0 )) s"
