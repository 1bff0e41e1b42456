#!/usr/bin/env bash
# Thirty-first session, second call: the 64-stream server e2e test (concurrent greedy texts equal
# to one-at-a-time texts) with the server on cuda:0 failed for 7 of 64 requests in the first call;
# whether the side copies (§33), the overlapped steps or the batch's numerics cause it: the test
# with PERFX_CUDA_ASIDE_COPIES=1 / 0, then 0 with PERFX_DECODE_OVERLAP=0, then graphs off.
#   run: command "bash tools/device/session_serve31.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
export PERFX_DEFAULT_MODEL=$ROOT/models/default
for arm in "PERFX_CUDA_ASIDE_COPIES=1" "PERFX_CUDA_ASIDE_COPIES=0" \
  "PERFX_CUDA_ASIDE_COPIES=0 PERFX_DECODE_OVERLAP=0" "PERFX_CUDA_GRAPHS=0 PERFX_DECODE_OVERLAP=0"; do
  env $arm PERFX_TEST_SERVE_ARGS="--device cuda" PERFX_TEST_BIN="$B/perfx" timeout 120 \
    "$B/tests/test_e2e" --gtest_filter='ServeE2E.SixtyFour*' > "$OUT/serve.log" 2>&1
  echo "$arm: rc=$? $(gtest_line "$OUT/serve.log") requests differing: $(grep -A1 'server_e2e_test.cpp:99: Failure' "$OUT/serve.log" | grep -c Failure) [$(grep -o 'request [0-9]*' "$OUT/serve.log" | tr '\n' ' ')]"
done
echo "total $(( $(date +%s) - T0 )) s"
