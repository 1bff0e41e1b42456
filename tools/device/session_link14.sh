#!/usr/bin/env bash
# Fourteenth session: add + RMSNorm linked into the decode GEMVs (NormLink, docs/cuda_linear_notes.md
# §22). CUDA conformance fp16 / bf16 (the new LinearAddRmsNormLinear case runs w4_gemv at these
# sizes), the fused cases again with w4_gemv3 on every matrix (PERFX_CUDA_GEMV3_MIN_MW=0: its
# producer, consumer and SwiGLU consumer), memcheck over both, CUDA model tests, then tg128 with
# PERFX_CUDA_NORM_LINK=0 / 1 interleaved on the AWQ and Q4_0 7B / TinyLlama shapes.
# Ran with development binaries of the NormLink experiment (final code: commit f9e8d00, run by
# session_link14b.sh); NormLink and PERFX_CUDA_ATTN_TRIGGER were reverted after it.
#   run: command "bash tools/device/session_link14.sh", carry [".devpack", ".devshared"]
#   (.devpack: bin.tar.xz with perfx, tests/test_conformance, tests/test_model; lib/)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-540}
L=/tmp/link14 && mkdir -p $L
C="$B/tests/test_conformance"
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" --gtest_filter='*cuda*' \
    > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
  grep -h -E "Failure|FAILED|rel err|differs" $L/conf_$dt.log | head -6 | cut -c1-220
  PERFX_CUDA_GEMV3_MIN_MW=0 PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" \
    --gtest_filter='*LinearAddRmsNorm*cuda*:*LinearSiluMul*cuda*:*Linear/cuda*' > $L/conf_v3_$dt.log 2>&1
  echo "conformance fused+linear, v3 everywhere, $dt rc=$?: $(gtest_line $L/conf_v3_$dt.log)"
  grep -h -E "Failure|FAILED|rel err|differs" $L/conf_v3_$dt.log | head -6 | cut -c1-220
done
for mw in 16 0; do
  PERFX_CUDA_GEMV3_MIN_MW=$mw PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck \
    --error-exitcode 3 "$C" --gtest_filter='*LinearAddRmsNorm*cuda*' > $L/memcheck_$mw.log 2>&1
  echo "memcheck fused (MIN_MW=$mw) rc=$?: $(grep -m1 'ERROR SUMMARY' $L/memcheck_$mw.log)"
done
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model rc=$?: $(gtest_line $L/model.log)"
grep -h -E "Failure|FAILED" $L/model.log | head -4 | cut -c1-200
echo "tests $(( $(date +%s) - T0 )) s"
OUT=$L ROUNDS=2 ab_tg PERFX_CUDA_NORM_LINK "0 1"
OUT=$L ROUNDS=1 MODELS="llama-2-7b:q4_0 tinyllama-1.1b:q4_0" ab_tg PERFX_CUDA_NORM_LINK "0 1"
tar -czf "$OUT/link14_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
