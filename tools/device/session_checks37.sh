#!/usr/bin/env bash
# Thirty-seventh session: the sampling kernels report a NaN / +inf logit (argmax, softmax and top-k
# draws write −1 for the row, the host names it; a fed −1 embeds zeros; penalties clamp an
# overflow to FLT_MAX). The CUDA conformance suite (fp16, bf16; SampleReportsNonFiniteLogits), the
# model tests (NonFiniteLogits: graphs captured and replayed with the argmax inside), memcheck over
# both new tests, then tg128 -r 5 on TinyLlama and 7B AWQ with the session's binary and the one
# before it (.devpack/old_bin.tar.xz), interleaved: the argmax's extra compare must not cost.
#   run: command "bash tools/device/session_checks37.sh", carry [".devpack", ".devshared"]
#   (TESTS_ONLY=1: the tests and memcheck, no benches)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
mkdir -p /tmp/devold && tar -xJf "$ROOT/.devpack/old_bin.tar.xz" -C /tmp/devold
OLD=/tmp/devold/.devbin/perfx
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$B/perfx" --version
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
memcheck_gtest test_conformance '*NonFinite*cuda*:*SampleAhead*cuda*' mc_conf.log "conformance sampling"
memcheck_gtest test_model '*NonFinite*cuda*' mc_model.log "model NonFiniteLogits"
[ -n "${TESTS_ONLY:-}" ] && { echo "total $(( $(date +%s) - T0 )) s"; exit 0; }
for round in 1 2; do
  for m in tinyllama-1.1b llama-2-7b; do
    reps "new r$round" "$B/perfx" "$m" -p 0 -n 128
    reps "old r$round" "$OLD" "$m" -p 0 -n 128
  done
done
# issue 9's acceptance benches with this binary (pp512 and the GGUF Q4_0 tg128 besides), within
# the budget
reps "new" "$B/perfx" llama-2-7b:q4_0 -p 0 -n 128
for m in tinyllama-1.1b llama-2-7b; do reps "new" "$B/perfx" "$m" -p 512 -n 0; done
echo "total $(( $(date +%s) - T0 )) s"
