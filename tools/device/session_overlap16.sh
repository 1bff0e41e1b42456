#!/usr/bin/env bash
# Sixteenth session (docs/cuda_linear_notes.md §25): overlapped decode (Engine::step_begin, the
# next step queued before this step's ids reach the host). Correctness: CUDA conformance fp16 /
# bf16 (SampleAheadFeedsTheNextStep among them), memcheck over the sampling cases, the CUDA model
# tests (EngineOverlap, greedy goldens through the overlapped generate). Then the trace build's
# between-steps gap on 7B and TinyLlama, overlap on / off, and tg128 interleaved:
# PERFX_DECODE_OVERLAP=1 / 0 on 7B AWQ (3 rounds), TinyLlama (3), 7B Q4_0 (1).
# Its one run (2026-12-03) had this filter as '*cuda*Sample*', which matches no test (the device
# comes last in the names): memcheck ran nothing; the filter is mended here.
#   run: command "bash tools/device/session_overlap16.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
L=/tmp/ov16 && mkdir -p $L
C="$B/tests/test_conformance"
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" --gtest_filter='*cuda*' > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
done
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 3 "$C" \
  --gtest_filter='*Sample*cuda*' > $L/conf_memcheck.log 2>&1
echo "conformance sampling memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' $L/conf_memcheck.log)"
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model rc=$?: $(gtest_line $L/model.log)"
grep -h -E "Failure|FAILED|Expected|Which is" $L/conf_*.log $L/model.log | head -12 | cut -c1-220
echo "tests $(( $(date +%s) - T0 )) s"
trace_bin
for m in llama-2-7b tinyllama-1.1b; do
  for ov in 1 0; do
    PERFX_DECODE_OVERLAP=$ov PERFX_CUDA_TRACE=$L/t.csv timeout 120 \
      /tmp/devtrace/perfx_trace bench -m random:$m --device cuda -p 0 -n 128 -r 2 > $L/t.md 2>&1
    python3 tools/device/trace_summary.py $L/t.csv --steps 4 > "$OUT/trace_${m}_ov$ov.txt" 2>&1
    echo "$m overlap $ov traced: $(grep tg128 $L/t.md | awk -F'|' '{print $(NF-1)}')"
    grep -h -i -E "between|step " "$OUT/trace_${m}_ov$ov.txt" | head -4
    rm -f $L/t.csv
  done
done
V="on=PERFX_DECODE_OVERLAP=1 off=PERFX_DECODE_OVERLAP=0"
OUT=$L run_variants llama-2-7b "$V" 3
OUT=$L run_variants tinyllama-1.1b "$V" 3
OUT=$L run_variants llama-2-7b:q4_0 "$V" 1
tar -czf "$OUT/ov16_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
