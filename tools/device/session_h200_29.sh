#!/usr/bin/env bash
# Twenty-ninth session, second call (the card is printed first: H200 asked for, H100 likely).
# w4_gemv3's first batch split around the PDL wait (PERFX_CUDA_GEMV3_PREWAIT=N: N ring slots
# before the wait, the rest after; cuda_linear_notes.md §32) against the whole ring before it (the
# default, 8) and, on 7B, against the binary before the knob (.devbin/perfx_base, dc23d45); tg128
# on 7B and TinyLlama AWQ, one round (device time left: 271 s, ~120 of them the machine's start):
# what would start past BUDGET (70 s) is skipped, the conformance suite (fp16) runs only under
# 100 s.
# Not run: no GPU could be started. The knob was reverted (208a924): re-apply 8aafb59's source
# changes and pack that build as .devbin/perfx, the build before them as .devbin/perfx_base.
#   run: command "bash tools/device/session_h200_29.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-70}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# arm LABEL BINARY PREWAIT MODEL: one tg128 (-r 3), "LABEL MODEL: t/s ± sd".
arm() { BIN=$2 bench_arm "$1 $4" "PERFX_CUDA_GEMV3_PREWAIT=$3" "$4" tg128 -p 0 -n 128 -r 3; }
arm "prewait8" "$B/perfx" 8 llama-2-7b
arm "prewait4" "$B/perfx" 4 llama-2-7b
arm "base    " "$B/perfx_base" 8 llama-2-7b
arm "prewait8" "$B/perfx" 8 tinyllama-1.1b
arm "prewait4" "$B/perfx" 4 tinyllama-1.1b
arm "prewait0" "$B/perfx" 0 llama-2-7b
arm "prewait0" "$B/perfx" 0 tinyllama-1.1b
if [ $(( $(date +%s) - T0 )) -lt 100 ]; then
  PERFX_TEST_DEVICE=cuda:0 timeout 60 "$B/tests/test_conformance" --gtest_filter='*cuda*' \
    > "$OUT/conf_f16.log" 2>&1
  echo "conformance f16 rc=$?: $(gtest_line "$OUT/conf_f16.log")"
fi
echo "total $(( $(date +%s) - T0 )) s"
