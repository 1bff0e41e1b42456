#!/usr/bin/env bash
# Twenty-third session, call 1: room for attention beside the QKV projection
# (docs/cuda_linear_notes.md §29). PERFX_CUDA_QKV_GRID_FREE=N leaves N CTA slots of the QKV
# w4_gemv3's one-wave grid unlaunched, so attention's 32 CTAs (7B), launched early when the QKV
# GEMV triggers early (PERFX_CUDA_QKV_TRIGGER=1: after its first batch), can be resident and run
# their prologue (staging the earlier steps' K/V) while the projection still streams. Arms
# "FREE,TRIGGER", interleaved, 7B tg128 (TinyLlama's QKV runs w4_gemv, which the knob leaves
# alone: one control arm), then 7B batch 8.
#   run: command "bash tools/device/session_grid23.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-540}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
arm() {  # arm FREE TRIGGER MODEL [extra bench args...]
  local free=$1 trig=$2 m=$3; shift 3
  over_budget && { echo "free=$free trig=$trig $m: skipped (budget)"; return; }
  local f="$OUT/bench_${m}_${free}_${trig}_$RANDOM.md"
  PERFX_CUDA_QKV_GRID_FREE=$free PERFX_CUDA_QKV_TRIGGER=$trig timeout 90 "$B/perfx" bench \
    -m "random:$m" --device cuda -p 0 "$@" > "$f" 2>&1
  echo "$m free=$free trig=$trig $*: $(grep -E '\| *tg' "$f" | awk -F'|' '{print $(NF-1)}' | tr '\n' ' ')"
}
for round in 1 2 3; do
  for a in "0 67" "32 67" "32 1" "0 1" "64 1"; do arm $a llama-2-7b -n 128 -r 3; done
done
arm 0 67 tinyllama-1.1b -n 128 -r 3
arm 32 1 tinyllama-1.1b -n 128 -r 3
for a in "0 67" "32 1" "0 67" "32 1"; do arm $a llama-2-7b -n 32 -B 8 -r 2; done
echo "total $(( $(date +%s) - T0 )) s"
