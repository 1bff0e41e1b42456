#!/usr/bin/env bash
# Twenty-third session, call 5: is the first K/V tile's wait after attention's PDL wait (points 12 ->
# 15, cuda_attention_notes.md "After the wait") set by the number of row copies a CTA issues? 7B
# traced, probe points 12 and 15: default (bulk copies, one split: 256 row copies a CTA), the
# cp.async path (PERFX_CUDA_ATTN_BULK=0) and two / four splits (128 / 64 row copies a CTA). Call 3's
# trace binary (.devpack/trace.tar.xz).
#   run: command "bash tools/device/session_copies23.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-260}
trace_bin
for v in "PERFX_CUDA_ATTN_BULK=1" "PERFX_CUDA_ATTN_BULK=0" "PERFX_CUDA_ATTN_SPLITS=2" "PERFX_CUDA_ATTN_SPLITS=4"; do
  for p in 12 15; do
    over_budget && continue
    env "$v" PERFX_CUDA_TRACE_PROBE=$p PERFX_CUDA_TRACE=/tmp/tr.csv timeout 100 \
      /tmp/devtrace/perfx_trace bench -m random:llama-2-7b --device cuda -p 0 -n 128 -r 1 > /tmp/tb.md 2>&1
    python3 tools/device/trace_summary.py /tmp/tr.csv --steps 6 > "$OUT/trace_${v#PERFX_CUDA_}_p$p.txt" 2>&1
    echo "$v probe $p traced $(grep tg128 /tmp/tb.md | awk -F'|' '{print $(NF-1)}'): $(grep -E '^attn ' "$OUT/trace_${v#PERFX_CUDA_}_p$p.txt")"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
