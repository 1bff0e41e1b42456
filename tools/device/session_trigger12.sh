#!/usr/bin/env bash
# Twelfth session, last call: (1) tg128 A/B, interleaved, 2 rounds: this session's perfx against
# its start (.devpack/old.tar.xz: perfx_old from cfc433b), and on 7B the QKV projection's w4_gemv3
# letting attention launch after 34 % / 67 % of its batches (PERFX_CUDA_QKV_TRIGGER; TinyLlama's
# QKV runs w4_gemv, which the knob does not touch); (2) the CUDA model tests with the knob set;
# (3) kernel traces (with each CTA's wait entry) of 7B default / QKV_TRIGGER=67 and TinyLlama.
# (The old arm did not run, as in session_kv12.sh: the QKV_TRIGGER=0 arm is the baseline.)
#   run: command "bash tools/device/session_trigger12.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
mkdir -p /tmp/old
tar -xJf .devpack/old.tar.xz -C /tmp/old
trace_bin
one() {  # one LABEL MODEL BIN [ENV...]
  local label=$1 m=$2 bin=$3 f
  shift 3
  f=/tmp/ab_${m}_$label.md
  env "$@" timeout 90 "$bin" bench -m random:$m --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
  local r
  r=$(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')
  echo "$m $label: ${r:-FAILED: $(tail -n 2 "$f" | tr '\n' ' ' | cut -c1-200)}"
}
for r in 1 2; do
  over_budget && continue
  one new_r$r llama-2-7b "$B/perfx" PERFX_CUDA_QKV_TRIGGER=0
  one old_r$r llama-2-7b /tmp/old/perfx_old PERFX_CUDA_QKV_TRIGGER=0
  one q34_r$r llama-2-7b "$B/perfx" PERFX_CUDA_QKV_TRIGGER=34
  one q67_r$r llama-2-7b "$B/perfx" PERFX_CUDA_QKV_TRIGGER=67
  one new_r$r tinyllama-1.1b "$B/perfx" PERFX_CUDA_QKV_TRIGGER=0
  one old_r$r tinyllama-1.1b /tmp/old/perfx_old PERFX_CUDA_QKV_TRIGGER=0
done
PERFX_CUDA_QKV_TRIGGER=67 PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" \
  --gtest_filter='*cuda*' > /tmp/model_q67.log 2>&1
echo "model tests, QKV_TRIGGER=67: rc=$? $(gtest_line /tmp/model_q67.log)"
for t in llama-2-7b:0 llama-2-7b:67 tinyllama-1.1b:0; do
  over_budget && continue
  m=${t%%:*} q=${t#*:}
  PERFX_CUDA_QKV_TRIGGER=$q PERFX_CUDA_TRACE=/tmp/trace_${m}_$q.csv timeout 90 /tmp/devtrace/perfx_trace \
    bench -m random:$m --device cuda -p 0 -n 128 -r 2 > /tmp/tr.md 2>&1
  echo "== $m QKV_TRIGGER=$q traced: $(grep tg128 /tmp/tr.md | awk -F'|' '{print $(NF-1)}')"
  python3 tools/device/trace_summary.py /tmp/trace_${m}_$q.csv --steps 6 2>&1 | sed -n '2,12p'
  xz -T4 -c /tmp/trace_${m}_$q.csv > "$OUT/trace12_${m}_q$q.csv.xz"
done
echo "total $(( $(date +%s) - T0 )) s"
