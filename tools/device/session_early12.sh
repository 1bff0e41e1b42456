#!/usr/bin/env bash
# Twelfth session, follow-up: the kernel trace showed the split-KV attention CTA spending ~5 µs
# before its griddepcontrol.wait (7B; the wait itself returns at once), while the o projection's
# CTAs — launched at attention's entry — issue their 8.6 MB weight preload. Does staging the
# earlier steps' keys before the wait (early_kv) still pay? tg128, interleaved, 2 rounds: the
# default (QKV_TRIGGER 67, early_kv) against PERFX_CUDA_ATTN_EARLY_PAIRS=0 (no early staging)
# and PERFX_CUDA_QKV_TRIGGER=0 (the session's start); a trace of the 7B early-off arm.
#   run: command "bash tools/device/session_early12.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
trace_bin
one() {  # one LABEL MODEL [ENV...]
  local label=$1 m=$2 f r
  shift 2
  f=/tmp/ab_${m}_$label.md
  env "$@" timeout 90 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
  r=$(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')
  echo "$m $label: ${r:-FAILED: $(tail -n 2 "$f" | tr '\n' ' ' | cut -c1-200)}"
}
for r in 1 2; do
  over_budget && continue
  one default_r$r llama-2-7b PERFX_CUDA_PDL=1
  one early0_r$r llama-2-7b PERFX_CUDA_ATTN_EARLY_PAIRS=0
  one qkv0_r$r llama-2-7b PERFX_CUDA_QKV_TRIGGER=0
  one default_r$r tinyllama-1.1b PERFX_CUDA_PDL=1
  one early0_r$r tinyllama-1.1b PERFX_CUDA_ATTN_EARLY_PAIRS=0
done
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > /tmp/model.log 2>&1
echo "model tests (default binary): rc=$? $(gtest_line /tmp/model.log)"
if ! over_budget; then
  PERFX_CUDA_ATTN_EARLY_PAIRS=0 PERFX_CUDA_QKV_TRIGGER=67 PERFX_CUDA_TRACE=/tmp/trace_e0.csv \
    timeout 90 /tmp/devtrace/perfx_trace bench -m random:llama-2-7b --device cuda -p 0 -n 128 -r 2 \
    > /tmp/tr.md 2>&1
  echo "== 7B early_kv off, traced: $(grep tg128 /tmp/tr.md | awk -F'|' '{print $(NF-1)}')"
  python3 tools/device/trace_summary.py /tmp/trace_e0.csv --steps 6 2>&1 | sed -n '2,12p'
  xz -T4 -c /tmp/trace_e0.csv > "$OUT/trace12_7b_early0.csv.xz"
fi
echo "total $(( $(date +%s) - T0 )) s"
