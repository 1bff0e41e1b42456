#!/usr/bin/env bash
# The eighth session's last device call: the default (W4A16) conformance suite on the final
# binary, the conformance linears with W4A8 on (w4_gemv3 forced; its activations now issued two
# slots ahead), and 7B / TinyLlama tg128 with PERFX_CUDA_W4A8=0 / 1 / skipq interleaved.
#   run: command "bash tools/device/session_final8.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf.log" 2>&1
echo "conformance (default) rc=$?: $(gtest_line "$OUT/conf.log")"
grep -E "Failure|FAILED" "$OUT/conf.log" | head -6 | cut -c1-220
PERFX_CUDA_W4A8=1 PERFX_CUDA_W4_GEMV=v3 PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" \
  --gtest_filter='*Linear*cuda*' > "$OUT/conf_a8.log" 2>&1
echo "conformance linears W4A8, w4_gemv3 forced rc=$?: $(gtest_line "$OUT/conf_a8.log")"
grep -E "Failure|FAILED" "$OUT/conf_a8.log" | head -6 | cut -c1-220
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    [ $round = 2 ] && [ $m = tinyllama-1.1b ] && continue
    for a in 0 1 skipq; do
      [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-300} ] && continue
      PERFX_CUDA_W4A8=$a timeout 60 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 \
        > "$OUT/bench_${m}_$a.$round.md" 2>&1
      echo "round $round $m w4a8 $a: $(grep tg128 "$OUT/bench_${m}_$a.$round.md" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
echo "total $(( $(date +%s) - T0 )) s"
