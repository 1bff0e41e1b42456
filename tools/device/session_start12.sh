#!/usr/bin/env bash
# Twelfth session, first call: (1) the CUDA model tests on the landed binary (cfc433b's
# simplification had not run on a GPU); (2) the w4_gemv3 bench with two extra 7B gate|up-K shapes
# of exactly 5 and 6 rounds of the one-wave grid (what the last, partial round of 7B gate|up —
# 5.21 rounds — costs: is a stream-K split of that round worth building? linear notes §19);
# (3) where the step goes now (PERFX_CUDA_SKIP ablation, as session_ablate.sh, with RoPE fused
# and the last-CTA merge); (4) TinyLlama's attention split count again (2 rounds).
#   run: command "bash tools/device/session_start12.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
echo "model rc=$?: $(gtest_line "$OUT/model.log")"
timeout 200 "$B/lin/linear_kernels_test" --bench-v3 > "$OUT/bench_v3.log" 2>&1
echo "bench rc=$? ($(( $(date +%s) - T0 )) s)"
grep -m1 "device-to-device" "$OUT/bench_v3.log"
sed -n '/^== w4_gemv3/,/^$/p' "$OUT/bench_v3.log"
for m in llama-2-7b tinyllama-1.1b; do
  for sk in none attn norm linear none; do
    over_budget && continue
    if [ "$sk" = none ]; then skip=; else skip=$sk; fi
    env ${skip:+PERFX_CUDA_SKIP=$skip} timeout 90 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 \
      > "$OUT/abl_${m}_$sk.md" 2>&1
    echo "$m skip $sk: $(grep tg128 "$OUT/abl_${m}_$sk.md" | awk -F'|' '{print $(NF-1)}')"
  done
done
run_variants tinyllama-1.1b "model=PERFX_CUDA_ATTN_MERGE=1 s1=PERFX_CUDA_ATTN_SPLITS=1 s2=PERFX_CUDA_ATTN_SPLITS=2" 2
echo "total $(( $(date +%s) - T0 )) s"
