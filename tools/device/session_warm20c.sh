#!/usr/bin/env bash
# Twentieth session, call 6 (docs/cuda_linear_notes.md §26): warming by cp.async.ca
# (PERFX_CUDA_L2_WARM=1), which call 5's probe found leaves the lines in L2 without the loads'
# wait before the PDL wait (mode 0 lost 8 % on 7B at 16 MiB). Correctness: CUDA model tests and
# memcheck over a W4 decode with mode 1 on every GEMV; then tg128 interleaved: mode 1 at 0 / 8 /
# 16 MiB (2 rounds), mode 0 at 8, mode 1 at 8 on every GEMV (=all).
# It ran a binary of the session's working tree: PERFX_CUDA_L2_WARM (0 loads, 1 cp.async.ca, 2
# cp.async.cg + evict_last; call 4's binary had cp.async.cg only), PERFX_CUDA_L2_PREFETCH_AT=all
# and PERFX_CUDA_L2_PREFETCH_SKIP are not in the committed code, which ignores them (its rule is
# session_warm20e.sh's); the figures are in docs/cuda_linear_notes.md §26.
#   run: command "bash tools/device/session_warm20c.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
L=/tmp/w20 && mkdir -p $L
export PERFX_CUDA_L2_WARM=1
PERFX_CUDA_L2_PREFETCH=16 PERFX_CUDA_L2_PREFETCH_AT=all PERFX_TEST_DEVICE=cuda:0 timeout 150 \
  "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model tests (mode 1, 16 MiB, all) rc=$?: $(gtest_line $L/model.log)"
PERFX_CUDA_L2_PREFETCH=16 PERFX_CUDA_L2_PREFETCH_AT=all timeout 200 "$SAN" --tool memcheck \
  --error-exitcode 3 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 16 -n 8 -r 1 \
  > $L/mc.log 2>&1
echo "memcheck TinyLlama decode (mode 1, 16 MiB, all) rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc.log)"
echo "tests $(( $(date +%s) - T0 )) s"
ROUNDS=2 ab_tg PERFX_CUDA_L2_PREFETCH "0 8 16"
PERFX_CUDA_L2_WARM=0 ROUNDS=1 ab_tg PERFX_CUDA_L2_PREFETCH "8"
PERFX_CUDA_L2_PREFETCH_AT=all ROUNDS=1 ab_tg PERFX_CUDA_L2_PREFETCH "8"
echo "total $(( $(date +%s) - T0 )) s"
