#!/usr/bin/env bash
# Twenty-third session, call 2: where split-KV attention's time goes after its PDL wait, and what
# room beside the QKV projection (PERFX_CUDA_QKV_GRID_FREE, §29 of docs/cuda_linear_notes.md)
# changes in the step. The trace build (tools/device/pack_trace.sh, .devpack/trace.tar.xz) runs
# 7B tg128 with the default configuration and with FREE=32 TRIGGER=1, plain and with the
# attention's after-wait probe points 11-14 (q in shared memory, RoPE + KV store done, key loop
# done, output stored; one per run: trace_summary.py's "mark" column); TinyLlama with 11 and 13.
# Then untraced: the 7B A/B again (two rounds), TinyLlama pp512, and the CUDA suite with the knob.
#   run: command "bash tools/device/session_trace23.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-540}
trace_bin
traced() {  # traced LABEL MODEL PROBE FREE TRIGGER
  over_budget && { echo "$1: skipped (budget)"; return; }
  local f=/tmp/trace_$1.csv
  PERFX_CUDA_TRACE_PROBE=$3 PERFX_CUDA_QKV_GRID_FREE=$4 PERFX_CUDA_QKV_TRIGGER=$5 \
    PERFX_CUDA_TRACE=$f timeout 120 "$PT" bench -m "random:$2" --device cuda -p 0 -n 128 -r 2 \
    > /tmp/tb_$1.md 2>&1
  echo "== $1 ($2 probe $3 free $4 trigger $5) traced tg128: $(grep tg128 /tmp/tb_$1.md | awk -F'|' '{print $(NF-1)}')"
  python3 tools/device/trace_summary.py $f --steps 6 --timeline > "$OUT/trace_$1.txt" 2>&1
  sed -n '4,20p' "$OUT/trace_$1.txt"
}
traced 7b_default llama-2-7b 0 0 67
traced 7b_free llama-2-7b 0 32 1
for p in 11 12 13 14; do
  traced 7b_default_p$p llama-2-7b $p 0 67 | grep -E '^==|^attn '
  traced 7b_free_p$p llama-2-7b $p 32 1 | grep -E '^==|^attn '
done
traced tiny_default tinyllama-1.1b 0 0 67
for p in 11 13; do traced tiny_p$p tinyllama-1.1b $p 0 67 | grep -E '^==|^attn '; done
echo "traces $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for a in "0 67" "32 67" "32 1"; do
    set -- $a
    over_budget && continue
    f="$OUT/bench_7b_$1_$2_r$round.md"
    PERFX_CUDA_QKV_GRID_FREE=$1 PERFX_CUDA_QKV_TRIGGER=$2 timeout 90 "$B/perfx" bench \
      -m random:llama-2-7b --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
    echo "7B free=$1 trig=$2 round $round: $(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')"
  done
done
timeout 90 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 512 -n 0 -r 3 > "$OUT/pp_tiny.md" 2>&1
echo "TinyLlama pp512: $(grep pp512 "$OUT/pp_tiny.md" | awk -F'|' '{print $(NF-1)}')"
over_budget || { export PERFX_CUDA_QKV_GRID_FREE=32 PERFX_CUDA_QKV_TRIGGER=1; mkdir -p /tmp/s23; cuda_suite /tmp/s23; }
echo "total $(( $(date +%s) - T0 )) s"
