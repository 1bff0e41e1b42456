#!/usr/bin/env bash
# Twenty-third session, call 4: does the first K/V tile land sooner when attention's prologue starts
# ~7 µs earlier (PERFX_CUDA_QKV_GRID_FREE=32, PERFX_CUDA_QKV_TRIGGER=1; cuda_linear_notes.md §29)?
# Attention's after-wait probe points 12, 15, 13 on 7B with and without the room. Ran with call 3's
# trace binary (.devpack/trace.tar.xz: it also read the new keys' slots before the wait, reverted
# after call 3; the points after 12 are unaffected by it).
#   run: command "bash tools/device/session_free15_23.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
trace_bin
for a in "0 67" "32 1"; do
  set -- $a
  for p in 12 15 13; do
    over_budget && continue
    PERFX_CUDA_QKV_GRID_FREE=$1 PERFX_CUDA_QKV_TRIGGER=$2 PERFX_CUDA_TRACE_PROBE=$p \
      PERFX_CUDA_TRACE=/tmp/tr.csv timeout 120 /tmp/devtrace/perfx_trace bench \
      -m random:llama-2-7b --device cuda -p 0 -n 128 -r 2 > /tmp/tb.md 2>&1
    python3 tools/device/trace_summary.py /tmp/tr.csv --steps 6 > "$OUT/trace_free$1_p$p.txt" 2>&1
    echo "free $1 trigger $2 probe $p traced $(grep tg128 /tmp/tb.md | awk -F'|' '{print $(NF-1)}'): $(grep -E '^attn ' "$OUT/trace_free$1_p$p.txt")"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
