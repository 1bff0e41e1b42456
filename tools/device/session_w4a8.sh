#!/usr/bin/env bash
# One device call for W4A8 decode (PERFX_CUDA_W4A8=1: w4_gemv3 with int8 activations,
# docs/cuda_linear_notes.md §13): correctness with it on (the conformance suite at the int8
# tolerance, compute-sanitizer memcheck over the conformance linears with w4_gemv3 forced, model
# parity on cuda), then batch-1 decode tg128 on the Llama-2-7B and TinyLlama-1.1B shapes (AWQ)
# and 7B batch-8 decode, PERFX_CUDA_W4A8=1 / 0 interleaved.
#   run: command "bash tools/device/session_w4a8.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
PERFX_CUDA_W4A8=1 PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf.log" 2>&1
echo "conformance W4A8 rc=$?: $(gtest_line "$OUT/conf.log")"
grep -E "Failure|max |FAILED" "$OUT/conf.log" | head -12 | cut -c1-220
PERFX_CUDA_W4A8=1 PERFX_CUDA_W4_GEMV=v3 PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_conformance" \
  --gtest_filter='*Linear*cuda*' > "$OUT/conf_v3.log" 2>&1
echo "conformance linears W4A8, w4_gemv3 forced rc=$?: $(gtest_line "$OUT/conf_v3.log")"
grep -E "Failure|FAILED" "$OUT/conf_v3.log" | head -8 | cut -c1-220
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
PERFX_CUDA_W4A8=1 PERFX_CUDA_W4_GEMV=v3 PERFX_TEST_DEVICE=cuda:0 timeout 150 "$SAN" --tool memcheck --error-exitcode 3 \
  "$B/tests/test_conformance" --gtest_filter='*Linear*cuda*' > "$OUT/memcheck.log" 2>&1
echo "memcheck linears (W4A8, w4_gemv3 forced) rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"
PERFX_CUDA_W4A8=1 PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
echo "model parity + greedy W4A8 rc=$?: $(gtest_line "$OUT/model.log")"
grep -E "Failure|dlogit" "$OUT/model.log" | head -10 | cut -c1-200
echo "== decode, PERFX_CUDA_W4A8=1 / 0 ($(( $(date +%s) - T0 )) s)"
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for a in 1 0; do
      [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-470} ] && continue
      PERFX_CUDA_W4A8=$a timeout 60 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 \
        > "$OUT/bench_${m}_$a.$round.md" 2>&1
      echo "round $round $m w4a8 $a: $(grep tg128 "$OUT/bench_${m}_$a.$round.md" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
for a in 1 0; do
  [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-470} ] && continue
  PERFX_CUDA_W4A8=$a timeout 60 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 \
    > "$OUT/bench_b8_$a.md" 2>&1
  echo "7B batch 8 w4a8 $a: $(grep -E 'tg32' "$OUT/bench_b8_$a.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
