#!/usr/bin/env bash
# One device call for the L2 prefetch of the next linear's weight (PERFX_CUDA_L2_PREFETCH=MiB,
# docs/cuda_linear_notes.md §11): correctness with it on (model parity + greedy on cuda fp16, the
# conformance suite, compute-sanitizer memcheck over the conformance linears), then batch-1 decode
# tg128 on the Llama-2-7B and TinyLlama-1.1B shapes (AWQ) at several sizes, two rounds interleaved.
#   run: command "bash tools/device/session_l2.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
PF=${PF:-32}
PERFX_CUDA_L2_PREFETCH=$PF PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
echo "model parity + greedy, prefetch $PF MiB, rc=$?: $(gtest_line "$OUT/model.log")"
grep -E "Failure|dlogit" "$OUT/model.log" | head -6 | cut -c1-200
PERFX_CUDA_L2_PREFETCH=$PF PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf.log" 2>&1
echo "conformance, prefetch $PF MiB, rc=$?: $(gtest_line "$OUT/conf.log")"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
PERFX_CUDA_L2_PREFETCH=$PF PERFX_CUDA_W4_GEMV=v3 PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 3 \
  "$B/tests/test_conformance" --gtest_filter='*Linear*cuda*' > "$OUT/memcheck.log" 2>&1
echo "memcheck linears (w4_gemv3 forced, prefetch on) rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"
echo "== decode tg128 by PERFX_CUDA_L2_PREFETCH (MiB) ($(( $(date +%s) - T0 )) s)"
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for pf in ${CAPS:-0 16 32 64}; do
      [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-420} ] && continue
      PERFX_CUDA_L2_PREFETCH=$pf timeout 60 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 \
        > "$OUT/bench_${m}_$pf.$round.md" 2>&1
      echo "round $round $m prefetch $pf: $(grep tg128 "$OUT/bench_${m}_$pf.$round.md" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
echo "total $(( $(date +%s) - T0 )) s"
