#!/usr/bin/env bash
# Twenty-ninth session, second call (the card is printed first: H200 asked for, H100 likely).
# w4_gemv3's first batch split around the PDL wait (PERFX_CUDA_GEMV3_PREWAIT=N: N ring slots
# before the wait, the rest after; cuda_linear_notes.md §32) against the whole ring before it (the
# default, 8) and, on 7B, against the binary before the knob (.devbin/perfx_base, dc23d45); tg128
# on 7B and TinyLlama AWQ, arms interleaved, rounds as the budget allows; the 7B GGUF Q4_0 shape
# (whose instance spills 12 bytes more with the knob's code) against the base; then the CUDA
# conformance suite (fp16) on the new binary. Budgeted for ~200 s (device time left: 376 s): what
# would start past BUDGET (130 s) is skipped, the suite runs only under 200 s.
#   run: command "bash tools/device/session_h200_29.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-130}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# arm LABEL BINARY PREWAIT MODEL [BENCH-ARGS...]: one perfx bench (default tg128 -r 3).
arm() {
  local label=$1 bin=$2 pw=$3 m=$4
  shift 4
  over_budget && { echo "$label $m: skipped (budget)"; return; }
  [ $# -gt 0 ] || set -- -p 0 -n 128 -r 3
  PERFX_CUDA_GEMV3_PREWAIT=$pw timeout 90 "$bin" bench -m "random:$m" --device cuda "$@" \
    > /tmp/a.md 2>&1
  { echo "## $label $m"; cat /tmp/a.md; } >> "$OUT/benches.md"
  echo "$label $m: $(grep -E '\| (tg|pp)[0-9]+ ' /tmp/a.md | awk -F'|' '{print $(NF-1)}' | tr '\n' ' ')"
}
for r in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    [ "$m" = llama-2-7b ] && arm "r$r base    " "$B/perfx_base" 8 "$m"
    arm "r$r prewait8" "$B/perfx" 8 "$m"
    arm "r$r prewait4" "$B/perfx" 4 "$m"
    arm "r$r prewait0" "$B/perfx" 0 "$m"
  done
  if [ "$r" = 1 ]; then
    arm "base    " "$B/perfx_base" 8 llama-2-7b:q4_0
    arm "prewait8" "$B/perfx" 8 llama-2-7b:q4_0
  fi
done
if [ $(( $(date +%s) - T0 )) -lt 200 ]; then
  PERFX_TEST_DEVICE=cuda:0 timeout 60 "$B/tests/test_conformance" --gtest_filter='*cuda*' \
    > "$OUT/conf_f16.log" 2>&1
  echo "conformance f16 rc=$?: $(gtest_line "$OUT/conf_f16.log")"
fi
echo "total $(( $(date +%s) - T0 )) s"
