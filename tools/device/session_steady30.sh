#!/usr/bin/env bash
# Thirtieth session, third call: bench without graph captures inside its timed repetitions (a
# full-length tg warm-up where graphs are captured, and the CUDA layout staging starting at 64 Ki
# entries so that its growth no longer re-captures every graph mid-run), against the old bench
# (perfx_base, dc23d45: same kernels). The e2e test that failed on the second call's binary (2
# captures left by the staging growth), on perfx and on perfx_mut (the full warm-up only where the
# short one captured, which misses a later test whose short warm-up finds its graphs cached: the
# test's tg16,40 must fail on it); tg128 -r 5 per repetition (-o json samples_ts) on
# TinyLlama, 7B AWQ and 7B GGUF Q4_0, new and base interleaved; pp512; 7B batch 8; the CUDA
# conformance suite (fp16) and model tests.
#   run: command "bash tools/device/session_steady30.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-380}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for bin in perfx perfx_mut; do e2e_on "$bin" 'CliBench.NoGraphCapture*'; done
for m in tinyllama-1.1b llama-2-7b; do
  reps "new " "$B/perfx" "$m" -p 0 -n 128
  reps "base" "$B/perfx_base" "$m" -p 0 -n 128
done
reps "new " "$B/perfx" llama-2-7b:q4_0 -p 0 -n 128
reps "base" "$B/perfx_base" llama-2-7b:q4_0 -p 0 -n 128
for m in tinyllama-1.1b llama-2-7b; do
  reps "new " "$B/perfx" "$m" -p 0 -n 128
done
reps "new " "$B/perfx" llama-2-7b -p 0 -n 32 -B 8
reps "new " "$B/perfx" tinyllama-1.1b -p 512 -n 0
reps "new " "$B/perfx" llama-2-7b -p 512 -n 0
over_budget || cuda_suite "$OUT" f16
echo "total $(( $(date +%s) - T0 )) s"
