#!/usr/bin/env bash
# Thirtieth session (not run: no H200 could be started, and then too little device time was left):
# for an H200 call — the acceptance shapes' decode at HEAD with the
# bench that leaves no graph capture inside its timed runs; tg128 -r 5 on TinyLlama, 7B AWQ and
# (budget permitting) 7B GGUF Q4_0.
#   run: command "bash tools/device/session_h200_30.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-60}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for m in tinyllama-1.1b llama-2-7b llama-2-7b:q4_0; do
  over_budget && continue
  timeout 60 "$B/perfx" bench -m "random:$m" --device cuda -p 0 -n 128 -r 5 > "$OUT/tg.md" 2>&1
  echo "$m: $(grep -E 'tg128|note' "$OUT/tg.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
