#!/usr/bin/env bash
# Thirty-second session, third call: the backend keeps the cuBLAS table (blas_, loaded before
# it makes anything) instead of asking cublas_dl for it at each call. CUDA conformance (fp16,
# bf16), model tests, bench's e2e cases on cuda:0, dense fp16 7B pp512, tg128 on TinyLlama; ~2 min.
#   run: command "bash tools/device/session_blas32.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-200}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
e2e_on perfx 'CliBench.*'
reps "blas" "$B/perfx" llama-2-7b:f16 -p 512 -n 0
reps "blas" "$B/perfx" tinyllama-1.1b -p 0 -n 128
echo "total $(( $(date +%s) - T0 )) s"
