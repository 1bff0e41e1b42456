#!/usr/bin/env bash
# Twentieth session, call 7 (docs/cuda_linear_notes.md §26): warming by cp.async.ca
# (PERFX_CUDA_L2_WARM=1) of the bytes past what gate|up's own ring preload covers
# (PERFX_CUDA_L2_PREFETCH_SKIP=KiB: 8448 = 264 CTAs x 32 KiB, the 7B first wave; 4224 = half).
# Correctness: CUDA model tests with warming on every GEMV, skip 8448; then tg128 interleaved:
# off / skip 8448 cap 8 / skip 8448 cap 16 (2 rounds), skip 4224 cap 8 (1 round).
# It ran a binary of the session's working tree: PERFX_CUDA_L2_WARM (0 loads, 1 cp.async.ca, 2
# cp.async.cg + evict_last; call 4's binary had cp.async.cg only), PERFX_CUDA_L2_PREFETCH_AT=all
# and PERFX_CUDA_L2_PREFETCH_SKIP are not in the committed code, which ignores them (its rule is
# session_warm20e.sh's); the figures are in docs/cuda_linear_notes.md §26.
#   run: command "bash tools/device/session_warm20d.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
L=/tmp/w20 && mkdir -p $L
export PERFX_CUDA_L2_WARM=1
PERFX_CUDA_L2_PREFETCH=16 PERFX_CUDA_L2_PREFETCH_SKIP=8448 PERFX_CUDA_L2_PREFETCH_AT=all \
  PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model tests (mode 1, skip 8448, 16 MiB, all) rc=$?: $(gtest_line $L/model.log)"
# one variable per arm for ab_tg: ARM=off|s8448c8|s8448c16|s4224c8
arm_env() {
  case $1 in
    off) echo "PERFX_CUDA_L2_PREFETCH=0" ;;
    s8448c8) echo "PERFX_CUDA_L2_PREFETCH=8 PERFX_CUDA_L2_PREFETCH_SKIP=8448" ;;
    s8448c16) echo "PERFX_CUDA_L2_PREFETCH=16 PERFX_CUDA_L2_PREFETCH_SKIP=8448" ;;
    s4224c8) echo "PERFX_CUDA_L2_PREFETCH=8 PERFX_CUDA_L2_PREFETCH_SKIP=4224" ;;
  esac
}
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    arms="off s8448c8 s8448c16"
    [ $round = 1 ] && arms="$arms s4224c8"
    for a in $arms; do
      over_budget && continue
      f="$OUT/bench_${m}_${a}_r$round.md"
      env $(arm_env $a) timeout 90 "$B/perfx" bench -m "random:$m" --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
      echo "$m $a round $round: $(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
echo "total $(( $(date +%s) - T0 )) s"
