#!/usr/bin/env bash
# Twelfth session, the final binary (after the review mends): CUDA conformance fp16 / bf16 (the
# 70,001-id greedy case new), CUDA model tests, and tg128 on both shapes once.
#   run: command "bash tools/device/session_final12.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
    --gtest_filter='*cuda*' > /tmp/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line /tmp/conf_$dt.log)"
  grep -h -E "Failure|FAILED" /tmp/conf_$dt.log | head -4 | cut -c1-200
done
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > /tmp/model.log 2>&1
echo "model rc=$?: $(gtest_line /tmp/model.log)"
for m in llama-2-7b tinyllama-1.1b; do
  over_budget && continue
  timeout 90 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 > /tmp/b_$m.md 2>&1
  echo "$m tg128: $(grep tg128 /tmp/b_$m.md | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
