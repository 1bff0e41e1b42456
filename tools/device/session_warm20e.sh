#!/usr/bin/env bash
# Twentieth session, call 8 (docs/cuda_linear_notes.md §26): the committed rule. With
# PERFX_CUDA_L2_PREFETCH unset, the GEMV after attention reads the first 8 MiB of the next weight
# into L2 (cp.async.ca) when that weight is at most 16 MiB: TinyLlama's gate|up yes, 7B's no.
# Correctness: CUDA conformance fp16 / bf16, model tests, memcheck over a TinyLlama decode (the
# rule on); then interleaved: TinyLlama tg128 default / off (3 rounds), batch 8 tg32 default /
# off, 7B tg128 default / off (1 round: the rule leaves 7B alone).
#   run: command "bash tools/device/session_warm20e.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-260}
L=/tmp/w20 && mkdir -p $L
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
    --gtest_filter='*cuda*' > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
done
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model tests rc=$?: $(gtest_line $L/model.log)"
timeout 200 "$SAN" --tool memcheck --error-exitcode 3 "$B/perfx" bench -m random:tinyllama-1.1b \
  --device cuda -p 16 -n 8 -r 1 > $L/mc.log 2>&1
echo "memcheck TinyLlama decode (rule on) rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc.log)"
echo "tests $(( $(date +%s) - T0 )) s"
for round in 1 2 3; do
  for a in default 0; do
    over_budget && continue
    f="$OUT/bench_tiny_${a}_r$round.md"
    if [ $a = default ]; then e=PERFX_CUDA_L2_PREFETCH=; else e=PERFX_CUDA_L2_PREFETCH=0; fi
    env $e timeout 90 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
    echo "tinyllama-1.1b $a round $round: $(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')"
  done
done
for a in default 0; do
  if [ $a = default ]; then e=PERFX_CUDA_L2_PREFETCH=; else e=PERFX_CUDA_L2_PREFETCH=0; fi
  over_budget && continue
  env $e timeout 90 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 -n 32 -B 8 -r 2 \
    > "$OUT/bench_tiny_b8_$a.md" 2>&1
  echo "tinyllama-1.1b batch 8 $a: $(grep tg32 "$OUT/bench_tiny_b8_$a.md" | awk -F'|' '{print $(NF-1)}')"
  over_budget && continue
  env $e timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 128 -r 3 \
    > "$OUT/bench_7b_$a.md" 2>&1
  echo "llama-2-7b $a: $(grep tg128 "$OUT/bench_7b_$a.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
