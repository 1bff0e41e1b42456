#!/usr/bin/env bash
# Fourteenth session, fifth call: NormLink with the consumer's 1/rms computed by the whole CTA
# right after its first activation loads (the first version had one warp a CTA walk the partial
# sums alone: that warp became each CTA's straggler, ~2 µs a consumer in the 7B trace of
# session_trace14.sh) and the producer's residual / γ lines prefetched into L1 after its PDL wait.
# CUDA conformance fp16 / bf16 (+ the fused cases with w4_gemv3 everywhere), memcheck over the
# fused cases, CUDA model tests with PERFX_CUDA_NORM_LINK=0, 1 and v1, then tg128 on the random
# 7B / TinyLlama AWQ shapes for NORM_LINK 0 / 1 / v1 interleaved (two rounds), and Q4_0 once.
# Ran f9e8d00's code, built before that commit (whose only change was the default: on here, so the
# conformance runs had the link on); NormLink and PERFX_CUDA_ATTN_TRIGGER were reverted after it.
#   run: command "bash tools/device/session_link14b.sh", carry [".devpack", ".devshared"]
#   (.devpack: bin.tar.xz with perfx, tests/test_conformance, tests/test_model; lib/)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-550}
L=/tmp/link14b && mkdir -p $L
C="$B/tests/test_conformance"
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" --gtest_filter='*cuda*' \
    > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
  grep -h -E "Failure|FAILED|rel err|differs" $L/conf_$dt.log | head -6 | cut -c1-220
  PERFX_CUDA_GEMV3_MIN_MW=0 PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" \
    --gtest_filter='*LinearAddRmsNorm*cuda*:*LinearSiluMul*cuda*' > $L/conf_v3_$dt.log 2>&1
  echo "conformance fused, v3 everywhere, $dt rc=$?: $(gtest_line $L/conf_v3_$dt.log)"
  grep -h -E "Failure|FAILED|rel err|differs" $L/conf_v3_$dt.log | head -4 | cut -c1-220
done
for mw in 16 0; do
  PERFX_CUDA_GEMV3_MIN_MW=$mw PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck \
    --error-exitcode 3 "$C" --gtest_filter='*LinearAddRmsNorm*cuda*' > $L/memcheck_$mw.log 2>&1
  echo "memcheck fused (MIN_MW=$mw) rc=$?: $(grep -m1 'ERROR SUMMARY' $L/memcheck_$mw.log)"
done
for v in 0 1 v1; do
  PERFX_CUDA_NORM_LINK=$v PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" \
    --gtest_filter='*cuda*' > $L/model_$v.log 2>&1
  echo "model (NORM_LINK=$v) rc=$?: $(gtest_line $L/model_$v.log)"
done
echo "tests $(( $(date +%s) - T0 )) s"
OUT=$L ROUNDS=2 ab_tg PERFX_CUDA_NORM_LINK "0 1 v1"
OUT=$L ROUNDS=1 MODELS="llama-2-7b:q4_0 tinyllama-1.1b:q4_0" ab_tg PERFX_CUDA_NORM_LINK "0 1 v1"
tar -czf "$OUT/link14b_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
