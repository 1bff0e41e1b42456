#!/usr/bin/env bash
# Sixteenth session, third call: the committed code (review mends: a sampling slot held by an
# outstanding draw is never handed out again; the engine forgets a step that failed). CUDA
# conformance fp16 / bf16, memcheck over its sampling cases and over EngineOverlap, the CUDA model
# tests; then tg128 interleaved, PERFX_DECODE_OVERLAP=1 / 0, 7B AWQ and TinyLlama, 2 rounds each.
#   run: command "bash tools/device/session_overlap16c.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-280}
L=/tmp/ov16c && mkdir -p $L
C="$B/tests/test_conformance"
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" --gtest_filter='*cuda*' > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
done
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 3 "$C" \
  --gtest_filter='*Sample*cuda*' > $L/conf_memcheck.log 2>&1
echo "conformance sampling memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' $L/conf_memcheck.log) $(gtest_line $L/conf_memcheck.log)"
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model rc=$?: $(gtest_line $L/model.log)"
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$SAN" --tool memcheck --error-exitcode 3 "$B/tests/test_model" \
  --gtest_filter='*EngineOverlap*cuda*' > $L/model_memcheck.log 2>&1
echo "EngineOverlap memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' $L/model_memcheck.log) $(gtest_line $L/model_memcheck.log)"
grep -h -E "Failure|FAILED|Expected|Which is" $L/conf_*.log $L/model*.log | head -12 | cut -c1-220
echo "tests $(( $(date +%s) - T0 )) s"
V="on=PERFX_DECODE_OVERLAP=1 off=PERFX_DECODE_OVERLAP=0"
OUT=$L run_variants llama-2-7b "$V" 2
OUT=$L run_variants tinyllama-1.1b "$V" 2
tar -czf "$OUT/ov16c_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
