#!/usr/bin/env bash
# W4A8 decode split into its two parts: PERFX_CUDA_W4A8=1 (quantize + GEMV), =skipq (the GEMV
# alone: the quantizer is not launched, timing only) and 0 (W4A16), interleaved; tg128 on the
# Llama-2-7B and TinyLlama-1.1B shapes (AWQ) and 7B batch 8. docs/cuda_linear_notes.md §13.
#   run: command "bash tools/device/session_w4a8_quant.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for a in 1 skipq 0; do
      [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-300} ] && continue
      PERFX_CUDA_W4A8=$a timeout 60 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 \
        > "$OUT/bench_${m}_$a.$round.md" 2>&1
      echo "round $round $m w4a8 $a: $(grep tg128 "$OUT/bench_${m}_$a.$round.md" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
for a in 1 skipq 0; do
  [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-300} ] && continue
  PERFX_CUDA_W4A8=$a timeout 60 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 \
    > "$OUT/bench_b8_$a.md" 2>&1
  echo "7B batch 8 w4a8 $a: $(grep -E 'tg32' "$OUT/bench_b8_$a.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
