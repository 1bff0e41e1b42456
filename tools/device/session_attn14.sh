#!/usr/bin/env bash
# Fourteenth session, third call: NormLink on both pairs of a 7B layer (o → gate|up too: the first
# binary refused consumers of more than kNormParts row blocks), and where attention lets the o
# projection launch (PERFX_CUDA_ATTN_TRIGGER=entry|wait|late, docs/cuda_linear_notes.md §23).
# CUDA conformance fp16 / bf16, the fused cases with w4_gemv3 everywhere, CUDA model tests (also
# with the trigger at wait and late), then tg128 on the random 7B / TinyLlama AWQ shapes for
# four variants, interleaved, two rounds.
# Ran with development binaries of the NormLink experiment (final code: commit f9e8d00, run by
# session_link14b.sh); NormLink and PERFX_CUDA_ATTN_TRIGGER were reverted after it.
#   run: command "bash tools/device/session_attn14.sh", carry [".devpack", ".devshared"]
#   (.devpack: bin.tar.xz with perfx, tests/test_conformance, tests/test_model; lib/)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-545}
L=/tmp/attn14 && mkdir -p $L
C="$B/tests/test_conformance"
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" --gtest_filter='*cuda*' \
    > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
  grep -h -E "Failure|FAILED|rel err|differs" $L/conf_$dt.log | head -6 | cut -c1-220
  PERFX_CUDA_GEMV3_MIN_MW=0 PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$C" \
    --gtest_filter='*LinearAddRmsNorm*cuda*:*LinearSiluMul*cuda*' > $L/conf_v3_$dt.log 2>&1
  echo "conformance fused, v3 everywhere, $dt rc=$?: $(gtest_line $L/conf_v3_$dt.log)"
done
for t in entry wait late; do
  PERFX_CUDA_ATTN_TRIGGER=$t PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" \
    --gtest_filter='*cuda*' > $L/model_$t.log 2>&1
  echo "model (attention trigger $t) rc=$?: $(gtest_line $L/model_$t.log)"
done
echo "tests $(( $(date +%s) - T0 )) s"
for m in llama-2-7b tinyllama-1.1b; do
  OUT=$L run_variants $m "unlinked=PERFX_CUDA_NORM_LINK=0 linked=PERFX_CUDA_NORM_LINK=1 \
linked_wait=PERFX_CUDA_NORM_LINK=1,PERFX_CUDA_ATTN_TRIGGER=wait \
linked_late=PERFX_CUDA_NORM_LINK=1,PERFX_CUDA_ATTN_TRIGGER=late" 2
done
tar -czf "$OUT/attn14_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
