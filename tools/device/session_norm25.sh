#!/usr/bin/env bash
# Twenty-fifth session's prepared call (written then, not run: no device was lent that session).
# The decode pair linear → add + RMSNorm → linear as two linked w4_gemv launches
# (PERFX_CUDA_NORM_FUSE=1, off by default; docs/cuda_linear_notes.md §30). Binaries packed by
# tools/device/pack_cuda_bins.sh (or the slim pack of docs/CUDA.md) from the commit under test.
#  1. correctness with the knob on: CUDA conformance fp16 / bf16 (LinearAddRmsNormLinear asserts
#     the fused pair bit for bit equal to linear + add_rms_norm + linear), memcheck over that case,
#     the CUDA model tests (greedy goldens, transformers parity);
#  2. speed, arms interleaved: TinyLlama tg128 three rounds (its down → QKV pairs fuse), 7B two
#     rounds (control: its GEMVs are w4_gemv3, nothing fuses), TinyLlama batch 8 (tg32 × 8);
#  3. PERFX_CUDA_SKIP=norm (every norm left out, timing only): the most any norm fusion can gain.
#   run: command "bash tools/device/session_norm25.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
for dt in f16 bf16; do
  PERFX_CUDA_NORM_FUSE=1 PERFX_CUDA_LINEAR_LOG=1 PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 \
    timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf_fuse_$dt.log" 2>&1
  echo "conformance $dt (fuse on) rc=$?: $(gtest_line "$OUT/conf_fuse_$dt.log")" \
    "fused pairs planned: $(grep -c 'norm-link (consumer)' "$OUT/conf_fuse_$dt.log") (0: the case never fused)"
done
grep -h -A3 'LinearAddRmsNormLinear' "$OUT"/conf_fuse_*.log | grep -E 'Failure|differs|FAILED' | head -6
PERFX_CUDA_NORM_FUSE=1 PERFX_CUDA_GRAPHS=0 PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck \
  --error-exitcode 3 "$B/tests/test_conformance" --gtest_filter='*LinearAddRmsNormLinear*cuda*' \
  > "$OUT/memcheck_fuse.log" 2>&1
echo "memcheck LinearAddRmsNormLinear (fuse on) rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck_fuse.log")"
PERFX_CUDA_NORM_FUSE=1 PERFX_CUDA_LINEAR_LOG=1 PERFX_TEST_DEVICE=cuda:0 timeout 150 \
  "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model_fuse.log" 2>&1
echo "model tests (fuse on) rc=$?: $(gtest_line "$OUT/model_fuse.log")" \
  "fused pairs planned: $(grep -c 'norm-link (consumer)' "$OUT/model_fuse.log")"
PERFX_CUDA_NORM_FUSE=1 PERFX_CUDA_LINEAR_LOG=1 timeout 60 "$B/perfx" bench -m random:tinyllama-1.1b \
  --device cuda -p 0 -n 8 -r 1 > "$OUT/plan_tiny.log" 2>&1
echo "TinyLlama plans with fuse on: $(grep -c 'norm-link' "$OUT/plan_tiny.log") norm-link lines" \
  "(want 2: the producer and the consumer)"
run_variants tinyllama-1.1b "off=PERFX_CUDA_NORM_FUSE=0 on=PERFX_CUDA_NORM_FUSE=1 skipnorm=PERFX_CUDA_SKIP=norm" 3
run_variants llama-2-7b "off=PERFX_CUDA_NORM_FUSE=0 on=PERFX_CUDA_NORM_FUSE=1" 2
for v in 0 1; do
  over_budget && continue
  PERFX_CUDA_NORM_FUSE=$v timeout 90 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 \
    -n 32 -B 8 -r 2 > "$OUT/bench_tiny_b8_$v.md" 2>&1
  echo "TinyLlama batch 8 NORM_FUSE=$v: $(grep tg32 "$OUT/bench_tiny_b8_$v.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
