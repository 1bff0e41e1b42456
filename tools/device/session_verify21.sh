#!/usr/bin/env bash
# Twenty-first session, call 1: the committed code (4a7151a) on the H200. First GPU run of
# L2Warm.LogitsEqualTheUnwarmedEngines (tests/model/l2_warm_test.cpp: warming forced, by the
# rule and off give bit-identical logits) and of the M = 1 restriction of the warming rule
# (docs/cuda_linear_notes.md §26): batch 8 default vs PERFX_CUDA_L2_PREFETCH=0 should now match.
# Then the baseline tg128 of both shapes for this session.
#   run: command "bash tools/device/session_verify21.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
L=/tmp/v21 && mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cuda_suite $L
grep -E '^\[ +(OK|FAILED|SKIPPED) +\].*L2Warm' $L/model.log
PERFX_TEST_DEVICE=cuda:0 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 "$B/tests/test_model" \
  --gtest_filter='*L2Warm*cuda*' > $L/mc.log 2>&1
echo "memcheck L2Warm rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc.log) $(gtest_line $L/mc.log)"
cp $L/*.log "$OUT/"
echo "tests $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for a in default 0; do
    over_budget && continue
    if [ $a = default ]; then e=PERFX_CUDA_L2_PREFETCH=; else e=PERFX_CUDA_L2_PREFETCH=0; fi
    f="$OUT/bench_tiny_b8_${a}_r$round.md"
    env $e timeout 90 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 -n 32 -B 8 -r 2 > "$f" 2>&1
    echo "tinyllama batch 8 $a round $round: $(grep tg32 "$f" | awk -F'|' '{print $(NF-1)}')"
  done
done
for m in tinyllama-1.1b llama-2-7b; do tg_line "HEAD" "$B/perfx" "random:$m"; cp "$OUT/tg_line.md" "$OUT/bench_$m.md"; done
echo "total $(( $(date +%s) - T0 )) s"
