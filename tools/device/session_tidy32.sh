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
memcheck_gtest test_conformance '*Sample*cuda*' memcheck.log "conformance *Sample*"
memcheck_gtest test_model '*EngineOverlap*cuda*' memcheck_model.log EngineOverlap
over_budget || serve64 "$B/perfx"
acceptance_reps tidy
echo "total $(( $(date +%s) - T0 )) s"
