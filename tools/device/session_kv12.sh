#!/usr/bin/env bash
# Twelfth session, after the kernel trace: (1) attn_checks on the new binary (the split-KV kernel's
# block-table reads batched before its cp.async, the vectorized argmax and its conformance case
# SampleGreedyFullVocabulary); (2) tg128 A/B, interleaved, 2 rounds: the new perfx against the
# session's start (.devpack/old.tar.xz: perfx_old, built from cfc433b); (3) the kernel trace of
# the new code (perfx_trace), summarised.
# Ran once: (1) and (3) as planned — the batched table reads measured 0.5–0.7 µs slower after the
# wait and were reverted; (2)'s old arm did not run (perfx_old, built in a worktree under /tmp,
# looked for its tokenizer under that tree: build the baseline inside the repository next time).
#   run: command "bash tools/device/session_kv12.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
KEEP=$OUT OUT=/tmp/chk && mkdir -p $OUT && attn_checks; OUT=$KEEP  # logs stay there: 8 files come back
mkdir -p /tmp/old
tar -xJf .devpack/old.tar.xz -C /tmp/old
trace_bin
for r in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for arm in new old; do
      over_budget && continue
      bin=$B/perfx
      [ $arm = old ] && bin=/tmp/old/perfx_old
      timeout 90 "$bin" bench -m random:$m --device cuda -p 0 -n 128 -r 3 > /tmp/ab_${m}_${arm}_$r.md 2>&1
      echo "$m $arm round $r: $(grep tg128 /tmp/ab_${m}_${arm}_$r.md | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
for m in llama-2-7b tinyllama-1.1b; do
  over_budget && continue
  PERFX_CUDA_TRACE=/tmp/trace_$m.csv timeout 90 /tmp/devtrace/perfx_trace bench -m random:$m \
    --device cuda -p 0 -n 128 -r 2 > /tmp/tr_$m.md 2>&1
  echo "$m traced: $(grep tg128 /tmp/tr_$m.md | awk -F'|' '{print $(NF-1)}')"
  python3 tools/device/trace_summary.py /tmp/trace_$m.csv --steps 6 > /tmp/trace_summary_$m.txt 2>&1
  sed -n '1,18p' /tmp/trace_summary_$m.txt
  xz -T4 -c /tmp/trace_$m.csv > "$OUT/trace12_$m.csv.xz"
done
echo "total $(( $(date +%s) - T0 )) s"
