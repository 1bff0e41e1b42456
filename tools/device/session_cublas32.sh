#!/usr/bin/env bash
# Thirty-second session, second call: cuBLAS dlopened when the CUDA backend is created
# (src/backend/cuda/cublas_dl.h) instead of linked. Start-up of `perfx --help` and of a CPU run
# (the GPU machine has the driver, so this is the cost a user there pays), the CUDA conformance
# suite (fp16, bf16: its dense linear cases go through cuBLAS) and model tests, a dense fp16 7B
# pp512 / tg32 (cuBLAS GEMMs in prefill), tg128 on TinyLlama and 7B AWQ; ~3 min.
#   run: command "bash tools/device/session_cublas32.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for i in 1 2 3; do /usr/bin/time -f "perfx --help: %e s" "$B/perfx" --help > /dev/null; done 2>&1
/usr/bin/time -f "perfx run --device cpu: %e s, peak RSS %M KiB" "$B/perfx" run -m models/default \
  -p "Once upon" -n 8 > /dev/null 2> "$OUT/cpu_run.err"; tail -1 "$OUT/cpu_run.err"
/usr/bin/time -f "perfx run --device cuda: %e s, peak RSS %M KiB" "$B/perfx" run -m models/default \
  -p "Once upon" -n 8 --device cuda > /dev/null 2> "$OUT/cuda_run.err"; tail -1 "$OUT/cuda_run.err"
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
reps "cublas-dl" "$B/perfx" llama-2-7b:f16 -p 512 -n 32
for m in tinyllama-1.1b llama-2-7b; do reps "cublas-dl" "$B/perfx" "$m" -p 0 -n 128; done
echo "total $(( $(date +%s) - T0 )) s"
