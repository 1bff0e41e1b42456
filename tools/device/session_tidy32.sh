#!/usr/bin/env bash
# Thirty-second session, first call: the GPU run a3e5dec (the tidy of the side copies' code,
# behaviour meant unchanged) never had. The CUDA conformance suite (fp16, bf16) and model tests,
# memcheck over the sampling and overlap cases, the 64-stream server e2e test on cuda:0, then
# tg128 -r 5 on TinyLlama, 7B AWQ and 7B GGUF Q4_0 and pp512 on TinyLlama and 7B (~4 min).
#   run: command "bash tools/device/session_tidy32.sh", kind nvidia-h200, carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-400}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 3 \
  "$B/tests/test_conformance" --gtest_filter='*Sample*cuda*' > "$OUT/memcheck.log" 2>&1
echo "memcheck conformance *Sample* rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log") $(gtest_line "$OUT/memcheck.log")"
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 3 \
  "$B/tests/test_model" --gtest_filter='*EngineOverlap*cuda*' > "$OUT/memcheck_model.log" 2>&1
echo "memcheck EngineOverlap rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck_model.log") $(gtest_line "$OUT/memcheck_model.log")"
over_budget || serve64 "$B/perfx"
for m in tinyllama-1.1b llama-2-7b llama-2-7b:q4_0; do reps "tidy" "$B/perfx" "$m" -p 0 -n 128; done
for m in tinyllama-1.1b llama-2-7b; do reps "tidy" "$B/perfx" "$m" -p 512 -n 0; done
echo "total $(( $(date +%s) - T0 )) s"
