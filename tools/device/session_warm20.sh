#!/usr/bin/env bash
# Twentieth session, call 4 (docs/cuda_linear_notes.md §26): L2 warming by plain cp.async reads.
# The probe (bench/cuda/l2_prefetch_probe.cu) first, for the cp.async variant the engine uses;
# then the engine with PERFX_CUDA_L2_PREFETCH=MiB: the GEMV right after attention (o) reads the
# first MiB of the next linear's weight (gate|up) into L2 before its PDL wait. Correctness: the
# CUDA model tests and memcheck over a W4 decode with warming on every GEMV (=all, the widest
# use); then tg128 interleaved, MiB 0 / 8 / 16 / 24 on 7B AWQ and TinyLlama, and =all at 16.
# It ran a binary of the session's working tree: PERFX_CUDA_L2_WARM (0 loads, 1 cp.async.ca, 2
# cp.async.cg + evict_last; call 4's binary had cp.async.cg only), PERFX_CUDA_L2_PREFETCH_AT=all
# and PERFX_CUDA_L2_PREFETCH_SKIP are not in the committed code, which ignores them (its rule is
# session_warm20e.sh's); the figures are in docs/cuda_linear_notes.md §26.
#   run: command "bash tools/device/session_warm20.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-500}
L=/tmp/w20 && mkdir -p $L
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/l2probe \
  bench/cuda/l2_prefetch_probe.cu && timeout 60 /tmp/l2probe 5 > "$OUT/l2probe.txt" 2>&1
grep -E '^(cold read |hot read \(|read after cp|  warm kernel, cp)' "$OUT/l2probe.txt"
PERFX_CUDA_L2_PREFETCH=16 PERFX_CUDA_L2_PREFETCH_AT=all PERFX_TEST_DEVICE=cuda:0 timeout 150 \
  "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model tests (warm 16 MiB, all) rc=$?: $(gtest_line $L/model.log)"
for m in tinyllama-1.1b; do
  PERFX_CUDA_L2_PREFETCH=16 PERFX_CUDA_L2_PREFETCH_AT=all timeout 200 "$SAN" --tool memcheck \
    --error-exitcode 3 "$B/perfx" bench -m random:$m --device cuda -p 16 -n 8 -r 1 > $L/mc_$m.log 2>&1
  echo "memcheck $m decode (warm 16 MiB, all) rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc_$m.log)"
done
echo "tests $(( $(date +%s) - T0 )) s"
ROUNDS=2 ab_tg PERFX_CUDA_L2_PREFETCH "0 16 8 24"
PERFX_CUDA_L2_PREFETCH_AT=all ROUNDS=1 ab_tg PERFX_CUDA_L2_PREFETCH "16"
echo "total $(( $(date +%s) - T0 )) s"
