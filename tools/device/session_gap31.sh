#!/usr/bin/env bash
# Thirty-first session, first call: the device work between two replayed decode steps
# (docs/cuda_linear_notes.md §33). tg128 -r 5 (per-repetition figures) on TinyLlama and 7B AWQ:
# PERFX_CUDA_ASIDE_COPIES=1 (the layout's upload and the ids' copy to the host on side streams,
# buffers alternating), =0 (both on the stream, as before), and =0 with PERFX_CUDA_SKIP=upload,ids
# (timing only: the upload unordered on a second stream, no ids copy — the bound), and on 7B the
# side copies with §29's room for attention beside the QKV projection (PERFX_CUDA_QKV_GRID_FREE=32,
# trigger 1) again; arms interleaved, two rounds. Then bench's no-capture-in-timed-runs e2e test (graphs now come in
# pairs), the server e2e test that reads /metrics with the server on cuda:0, the CUDA suite (fp16
# and bf16) with the side copies, conformance fp16 without them, and memcheck over the sampling
# and overlap cases.
#   run: command "bash tools/device/session_gap31.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-400}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for r in 1 2; do
  for m in tinyllama-1.1b llama-2-7b; do
    arms="aside bound plain"
    [ "$m" = llama-2-7b ] && arms="$arms free32"
    for a in $arms; do
      unset PERFX_CUDA_SKIP PERFX_CUDA_QKV_GRID_FREE PERFX_CUDA_QKV_TRIGGER
      export PERFX_CUDA_ASIDE_COPIES=0
      case $a in
        aside) export PERFX_CUDA_ASIDE_COPIES=1 ;;
        bound) export PERFX_CUDA_SKIP=upload,ids ;;
        free32) export PERFX_CUDA_ASIDE_COPIES=1 PERFX_CUDA_QKV_GRID_FREE=32 PERFX_CUDA_QKV_TRIGGER=1 ;;
      esac
      reps "r$r $a" "$B/perfx" "$m" -p 0 -n 128
    done
  done
done
unset PERFX_CUDA_SKIP PERFX_CUDA_ASIDE_COPIES PERFX_CUDA_QKV_GRID_FREE PERFX_CUDA_QKV_TRIGGER
e2e_on perfx 'CliBench.NoGraphCapture*'
over_budget || {
  PERFX_TEST_SERVE_ARGS="--device cuda" PERFX_TEST_BIN="$B/perfx" timeout 120 "$B/tests/test_e2e" \
    --gtest_filter='ServeE2E.SixtyFour*' > "$OUT/serve.log" 2>&1
  echo "serve e2e on cuda rc=$?: $(gtest_line "$OUT/serve.log")"
  grep -E 'Failure|Expected|Which is|perfx \]' "$OUT/serve.log" | head -8 | cut -c1-240
}
BUDGET=560
over_budget || cuda_suite "$OUT" "f16 bf16"
over_budget || {
  PERFX_CUDA_ASIDE_COPIES=0 PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
    --gtest_filter='*cuda*' > "$OUT/conf_plain.log" 2>&1
  echo "conformance f16 aside=0 rc=$?: $(gtest_line "$OUT/conf_plain.log")"
}
over_budget || memcheck_gtest test_conformance '*Sample*cuda*' memcheck.log "conformance *Sample*"
over_budget || memcheck_gtest test_model '*EngineOverlap*cuda*' memcheck_model.log EngineOverlap
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
echo "total $(( $(date +%s) - T0 )) s"
