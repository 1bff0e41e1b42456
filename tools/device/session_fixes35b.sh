#!/usr/bin/env bash
# Thirty-fifth session, after the review of the fixes (session_fixes35.sh ran the first version):
# the out-of-memory cases now fail their allocations through PERFX_CUDA_FAULT_ALLOC_OVER instead of
# filling the GPU, the thread case runs three steps (both layout parities' captures, then a
# replay), and device buffers are freed with their own GPU current (device_free). The new cases
# (all four now under memcheck: no real allocation fails), the whole CUDA conformance suite (fp16,
# bf16) and model tests, memcheck over EngineOverlap, the 64-stream server e2e test, tg128 -r 5 on
# TinyLlama and 7B AWQ; ~2 min.
#   run: command "bash tools/device/session_fixes35b.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
NEW='*AStepThatThrows*cuda*:*StepsFromAnotherThread*cuda*:*OutOfMemoryNames*cuda*:*AFailedLayoutGrowth*cuda*'
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" --gtest_filter="$NEW" > "$OUT/new.log" 2>&1
echo "the new cases rc=$?: $(gtest_line "$OUT/new.log")"
grep -E 'Failure|out of GPU memory' "$OUT/new.log" | head -6 | cut -c1-240
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
memcheck_gtest test_conformance "$NEW" memcheck_new.log "the new cases"
memcheck_gtest test_model '*EngineOverlap*cuda*' memcheck_model.log EngineOverlap
over_budget || serve64 "$B/perfx"
for m in tinyllama-1.1b llama-2-7b; do reps fixed "$B/perfx" "$m" -p 0 -n 128; done
echo "total $(( $(date +%s) - T0 )) s"
