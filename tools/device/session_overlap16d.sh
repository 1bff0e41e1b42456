#!/usr/bin/env bash
# Sixteenth session, fourth call: the last-read mends (every outstanding draw drained when a
# generation is abandoned; shared row checks). CUDA conformance fp16, the CUDA model tests.
#   run: command "bash tools/device/session_overlap16d.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
L=/tmp/ov16d && mkdir -p $L
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' > $L/conf.log 2>&1
echo "conformance f16 rc=$?: $(gtest_line $L/conf.log)"
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model rc=$?: $(gtest_line $L/model.log)"
grep -h -E "Failure|FAILED" $L/*.log | head -8 | cut -c1-220
