#!/usr/bin/env bash
# Thirty-third session, first call: HEAD (512c43b: cuBLAS dlopened, the review's mends and tidies)
# on a GPU, asked for as an H200 (the acceptance machine, not re-measured since the twenty-seventh
# session). The CUDA conformance suite (fp16, bf16) and model tests, memcheck over the sampling and
# overlap cases (the first memcheck of the dlopened cuBLAS build), the 64-stream server e2e test on
# cuda:0, then issue 9's benches (tg128 -r 5 on TinyLlama, 7B AWQ, 7B GGUF Q4_0; pp512 on TinyLlama
# and 7B); ~4 min.
#   run: command "bash tools/device/session_head33.sh", kind nvidia-h200, carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
acceptance_reps head
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
memcheck_gtest test_conformance '*Sample*cuda*' memcheck.log "conformance *Sample*"
memcheck_gtest test_model '*EngineOverlap*cuda*' memcheck_model.log EngineOverlap
over_budget || serve64 "$B/perfx"
echo "total $(( $(date +%s) - T0 )) s"
