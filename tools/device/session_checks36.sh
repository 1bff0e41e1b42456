#!/usr/bin/env bash
# Thirty-sixth session: the shared code changed under the CUDA backend (the model loader's layer and
# tensor-type checks, the reference sampler's NaN check that the CUDA host-side rows use, the
# scheduler's 400, HTTP framing); no CUDA kernel or backend file changed. The CUDA conformance suite
# (fp16, bf16) and model tests, the 64-stream server e2e test, tg128 -r 5 on TinyLlama and 7B AWQ
# (the speed must be unchanged: same kernels); ~2 min.
#   run: command "bash tools/device/session_checks36.sh", carry [".devpack", ".devshared"]
# Not run in the thirty-sixth session: no device machine could be started when it was ready.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$B/perfx" --version
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
over_budget || serve64 "$B/perfx"
for m in tinyllama-1.1b llama-2-7b; do reps fixed "$B/perfx" "$m" -p 0 -n 128; done
echo "total $(( $(date +%s) - T0 )) s"
