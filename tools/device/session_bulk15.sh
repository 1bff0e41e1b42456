#!/usr/bin/env bash
# Fifteenth session, first call: the split-KV attention's earlier keys staged with one bulk (TMA)
# copy per key row (PERFX_CUDA_ATTN_BULK=1) instead of 16-byte cp.async (docs/cuda_linear_notes.md
# §24). Correctness with the bulk path on: the attention kernel test (full set) and memcheck /
# synccheck over its reduced set, CUDA conformance fp16 / bf16, the CUDA model tests. Then the
# trace build's probe 2 (staging issued) and wait entry on 7B / TinyLlama for BULK 0 and 1, and
# tg128 on the random 7B / TinyLlama AWQ shapes for BULK 0 / 1 interleaved, two rounds; probe 2
# on 7B with PERFX_CUDA_ATTN_SPLITS=2 too.
# Ran the first version of the bulk path (off by default then, PERFX_CUDA_ATTN_BULK=0|1).
#   run: command "bash tools/device/session_bulk15.sh", carry [".devpack", ".devshared"]
#   (.devpack: bin.tar.xz with perfx, tests/test_{conformance,model}, attn/attention_kernels_test;
#   trace.tar.xz; lib/)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-560}
L=/tmp/bulk15 && mkdir -p $L
A="$B/attn/attention_kernels_test"
PERFX_CUDA_ATTN_BULK=1 timeout 120 "$A" > $L/attn.log 2>&1
echo "attention kernels (bulk) rc=$?: $(grep -E '^SUMMARY' $L/attn.log)"
grep -E "^\[FAIL\]" $L/attn.log | head -5 | cut -c1-200
for tool in memcheck synccheck; do
  PERFX_CUDA_ATTN_BULK=1 timeout 150 "$SAN" --tool $tool --error-exitcode 7 "$A" --quick \
    > $L/san_$tool.log 2>&1
  echo "$tool (bulk) rc=$?: $(grep -E 'ERROR SUMMARY' $L/san_$tool.log | tail -1)"
done
C="$B/tests/test_conformance"
for dt in f16 bf16; do
  PERFX_CUDA_ATTN_BULK=1 PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" \
    --gtest_filter='*cuda*' > $L/conf_$dt.log 2>&1
  echo "conformance (bulk) $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
  grep -h -E "Failure|FAILED|rel err|differs" $L/conf_$dt.log | head -4 | cut -c1-220
done
PERFX_CUDA_ATTN_BULK=1 PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" \
  --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model (bulk) rc=$?: $(gtest_line $L/model.log)"
echo "tests $(( $(date +%s) - T0 )) s"
trace_bin
for m in llama-2-7b tinyllama-1.1b; do
  for bulk in 0 1; do
    PERFX_CUDA_ATTN_BULK=$bulk PERFX_CUDA_TRACE=$L/tr_${m}_$bulk.csv PERFX_CUDA_TRACE_PROBE=2 \
      timeout 120 "$PT" bench -m random:$m --device cuda -p 0 -n 128 -r 2 > $L/tb_${m}_$bulk.md 2>&1
    python3 tools/device/trace_summary.py $L/tr_${m}_$bulk.csv --steps 4 \
      > "$OUT/probe2_${m}_bulk$bulk.txt" 2>&1
    PERFX_CUDA_ATTN_BULK=$bulk PERFX_CUDA_TRACE=$L/tw_${m}_$bulk.csv \
      timeout 120 "$PT" bench -m random:$m --device cuda -p 0 -n 128 -r 2 > $L/tw_${m}_$bulk.md 2>&1
    python3 tools/device/trace_summary.py $L/tw_${m}_$bulk.csv --steps 4 \
      > "$OUT/wait_${m}_bulk$bulk.txt" 2>&1
    echo "$m bulk $bulk traced: $(grep tg128 $L/tw_${m}_$bulk.md | awk -F'|' '{print $(NF-1)}')"
    grep -h -E "^op |^attn " "$OUT/probe2_${m}_bulk$bulk.txt" | sed 's/^/  probe2 /'
    grep -h -E "^attn " "$OUT/wait_${m}_bulk$bulk.txt" | sed 's/^/  wait   /'
  done
done
for bulk in 0 1; do  # two splits a (sequence, KV head): half the keys a CTA (§23's open question)
  PERFX_CUDA_ATTN_SPLITS=2 PERFX_CUDA_ATTN_BULK=$bulk PERFX_CUDA_TRACE=$L/ts_$bulk.csv \
    PERFX_CUDA_TRACE_PROBE=2 timeout 120 "$PT" bench -m random:llama-2-7b --device cuda -p 0 \
    -n 128 -r 2 > $L/ts_$bulk.md 2>&1
  python3 tools/device/trace_summary.py $L/ts_$bulk.csv --steps 4 > "$OUT/probe2_7b_splits2_bulk$bulk.txt" 2>&1
  echo "7B splits 2 bulk $bulk traced: $(grep tg128 $L/ts_$bulk.md | awk -F'|' '{print $(NF-1)}')"
  grep -h -E "^op |^attn " "$OUT/probe2_7b_splits2_bulk$bulk.txt" | sed 's/^/  probe2 /'
done
rm -f $L/*.csv
OUT=$L ROUNDS=2 ab_tg PERFX_CUDA_ATTN_BULK "0 1"
tar -czf "$OUT/bulk15_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
