#!/usr/bin/env bash
# Twenty-fourth session, call 3: the split-KV attention's loads that need no batch-layout value
# (the staged rows' block-table entries, RoPE's inverse frequencies) issued at the CTA's start,
# before the layout's reads (docs/cuda_attention_notes.md, "A block a copy", the prologue's loads).
# Binary A/B: .devpack/old.tar.xz (call 2's binary: block copies) vs .devpack/bin.tar.xz (this
# change on top), 7B three rounds and TinyLlama two, interleaved; the trace build (this change)
# at probe points 2 and 12; then the attention kernel tests, sanitizers, conformance and model
# tests on the new binary.
#   run: command "bash tools/device/session_entry24.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
mkdir -p /tmp/devold && tar -xJf .devpack/old.tar.xz -C /tmp/devold
A=$B/attn/attention_kernels_test
timeout 120 "$A" > "$OUT/attn.log" 2>&1
echo "attention kernels rc=$?: $(grep -m1 SUMMARY "$OUT/attn.log")"
grep -m4 '^\[FAIL\]' "$OUT/attn.log" | cut -c1-220
for r in 1 2 3; do
  for m in llama-2-7b tinyllama-1.1b; do
    [ "$m" = tinyllama-1.1b ] && [ "$r" = 3 ] && continue
    for bin in new old; do
      over_budget && continue
      p=$B/perfx; [ $bin = old ] && p=/tmp/devold/.devbin/perfx
      timeout 90 "$p" bench -m "random:$m" --device cuda -p 0 -n 128 -r 3 > "$OUT/tg_${m}_${bin}_r$r.md" 2>&1
      echo "$m $bin round $r: $(grep tg128 "$OUT/tg_${m}_${bin}_r$r.md" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
echo "benches done at $(( $(date +%s) - T0 )) s"
trace_bin
for p in 2 12; do
  over_budget && continue
  PERFX_CUDA_TRACE_PROBE=$p PERFX_CUDA_TRACE=/tmp/tr.csv timeout 100 \
    /tmp/devtrace/perfx_trace bench -m random:llama-2-7b --device cuda -p 0 -n 128 -r 1 > /tmp/tb.md 2>&1
  python3 tools/device/trace_summary.py /tmp/tr.csv --steps 6 > "$OUT/trace_p$p.txt" 2>&1
  echo "probe $p traced $(grep tg128 /tmp/tb.md | awk -F'|' '{print $(NF-1)}'): $(grep -E '^attn ' "$OUT/trace_p$p.txt")"
done
attn_san 100 "memcheck racecheck"
cuda_suite "$OUT"
echo "total $(( $(date +%s) - T0 )) s"
