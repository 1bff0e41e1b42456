#!/usr/bin/env bash
# Sixteenth session, second call (docs/cuda_linear_notes.md §25): the greedy argmax inside the
# captured decode graph (PERFX_CUDA_GRAPH_ARGMAX, default 1; 0 = launched after the graph with the
# rows uploaded, as in session_overlap16.sh), its ids written where a fed step's embedding reads
# them. Correctness: CUDA conformance fp16 / bf16, memcheck over its sampling cases, the CUDA model
# tests with the knob on and off. Then the trace build's between-steps gap and argmax, knob 1 / 0,
# on 7B and TinyLlama, and tg128 interleaved: knob 1 / 0 on 7B AWQ and TinyLlama (3 rounds each).
#   run: command "bash tools/device/session_overlap16b.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
L=/tmp/ov16b && mkdir -p $L
C="$B/tests/test_conformance"
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" --gtest_filter='*cuda*' > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
done
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 3 "$C" \
  --gtest_filter='*Sample*cuda*' > $L/conf_memcheck.log 2>&1
echo "conformance sampling memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' $L/conf_memcheck.log) $(gtest_line $L/conf_memcheck.log)"
for ga in 1 0; do
  PERFX_CUDA_GRAPH_ARGMAX=$ga PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" \
    --gtest_filter='*cuda*' > $L/model_$ga.log 2>&1
  echo "model (graph argmax $ga) rc=$?: $(gtest_line $L/model_$ga.log)"
done
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$SAN" --tool memcheck --error-exitcode 3 "$B/tests/test_model" \
  --gtest_filter='*EngineOverlap*cuda*' > $L/model_memcheck.log 2>&1
echo "EngineOverlap memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' $L/model_memcheck.log) $(gtest_line $L/model_memcheck.log)"
grep -h -E "Failure|FAILED|Expected|Which is" $L/conf_*.log $L/model_*.log | head -12 | cut -c1-220
echo "tests $(( $(date +%s) - T0 )) s"
trace_bin
for m in llama-2-7b tinyllama-1.1b; do
  for ga in 1 0; do
    PERFX_CUDA_GRAPH_ARGMAX=$ga PERFX_CUDA_TRACE=$L/t.csv timeout 120 \
      /tmp/devtrace/perfx_trace bench -m random:$m --device cuda -p 0 -n 128 -r 2 > $L/t.md 2>&1
    python3 tools/device/trace_summary.py $L/t.csv --steps 4 > "$OUT/trace_${m}_ga$ga.txt" 2>&1
    echo "$m graph argmax $ga traced: $(grep tg128 $L/t.md | awk -F'|' '{print $(NF-1)}') |" \
      "$(grep -h -E '^between' "$OUT/trace_${m}_ga$ga.txt") | $(grep -h -E '^(argmax|lm_head)' "$OUT/trace_${m}_ga$ga.txt" | tr -s ' ' | tr '\n' ';')"
    rm -f $L/t.csv
  done
done
V="ga1=PERFX_CUDA_GRAPH_ARGMAX=1 ga0=PERFX_CUDA_GRAPH_ARGMAX=0"
OUT=$L run_variants llama-2-7b "$V" 3
OUT=$L run_variants tinyllama-1.1b "$V" 3
tar -czf "$OUT/ov16b_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
