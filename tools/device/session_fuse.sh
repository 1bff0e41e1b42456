#!/usr/bin/env bash
# One device call for the add + RMSNorm prologue of w4_gemv3 (docs/cuda_linear_notes.md §12; the
# experiment of commit 34a7c50, reverted after this run: build that commit to rerun it):
# correctness (the conformance suite, whose AddRmsNorm* cases also compare residual and h bit for
# bit with the two ops they replace; compute-sanitizer memcheck over those cases; model parity and
# greedy on cuda; a greedy-text comparison of the AWQ fixtures that is broken: they ship no
# tokenizer.json, so both runs print nothing and compare "equal"),
# then decode speed with PERFX_CUDA_FUSE_NORM=1 / 0 interleaved: tg128 on the Llama-2-7B and
# TinyLlama-1.1B shapes (AWQ) and batch-8 decode on 7B.
#   run: command "bash tools/device/session_fuse.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf.log" 2>&1
echo "conformance rc=$?: $(gtest_line "$OUT/conf.log")"
grep -E "Failure|differs|FAILED" "$OUT/conf.log" | head -8 | cut -c1-220
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$SAN" --tool memcheck --error-exitcode 3 \
  "$B/tests/test_conformance" --gtest_filter='*AddRmsNorm*cuda*' > "$OUT/memcheck.log" 2>&1
echo "memcheck fused norm cases rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
echo "model parity + greedy rc=$?: $(gtest_line "$OUT/model.log")"
grep -E "Failure|dlogit" "$OUT/model.log" | head -6 | cut -c1-200
for fx in tiny-awq-gemm tiny-awq-gemv; do
  for f in 1 0; do
    PERFX_CUDA_FUSE_NORM=$f PERFX_CUDA_LINEAR_LOG=1 timeout 60 "$B/perfx" run -m "tests/fixtures/$fx" \
      -p "Once upon a time" -n 48 --temp 0 --device cuda > "$OUT/run_${fx}_$f.txt" 2> "$OUT/run_${fx}_$f.err"
  done
  if cmp -s "$OUT/run_${fx}_1.txt" "$OUT/run_${fx}_0.txt"; then s=equal; else s=DIFFERENT; fi
  echo "greedy $fx fused vs unfused: $s ($(wc -c < "$OUT/run_${fx}_1.txt") bytes; fused plans: $(grep -c add_rms_norm "$OUT/run_${fx}_1.err"))"
done
echo "== decode, PERFX_CUDA_FUSE_NORM=1 / 0 ($(( $(date +%s) - T0 )) s)"
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for f in 1 0; do
      [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-450} ] && continue
      PERFX_CUDA_FUSE_NORM=$f timeout 60 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 \
        > "$OUT/bench_${m}_$f.$round.md" 2>&1
      echo "round $round $m fuse $f: $(grep tg128 "$OUT/bench_${m}_$f.$round.md" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
for f in 1 0; do
  [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-450} ] && continue
  PERFX_CUDA_FUSE_NORM=$f timeout 60 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 \
    > "$OUT/bench_b8_$f.md" 2>&1
  echo "7B batch 8 fuse $f: $(grep -E 'tg32' "$OUT/bench_b8_$f.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
