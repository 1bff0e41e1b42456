#!/usr/bin/env bash
# Thirty-first session, last call (the binary of the session's final code: the side copies, the
# least-recently-used graph cache, the bench warm-up floor): the 64-stream server e2e test on
# cuda:0 with every request asking logprobs 2 (a batched stream may leave its solo stream only at a
# near-tie, checked token by token), PERFX_CUDA_SKIP=upload refused with the side copies on, the
# CUDA conformance suite (fp16) and model tests, tg128 -r 5 on TinyLlama and 7B AWQ.
#   run: command "bash tools/device/session_final31.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-230}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
serve64 "$B/perfx"
PERFX_CUDA_SKIP=upload timeout 30 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 \
  -n 8 -r 1 > /dev/null 2> "$OUT/skip.err"
echo "SKIP=upload with the side copies: rc=$? $(head -c 200 "$OUT/skip.err")"
over_budget || cuda_suite "$OUT" f16
for m in tinyllama-1.1b llama-2-7b; do reps "final" "$B/perfx" "$m" -p 0 -n 128; done
echo "total $(( $(date +%s) - T0 )) s"
