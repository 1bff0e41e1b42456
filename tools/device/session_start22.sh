#!/usr/bin/env bash
# Twenty-second session, call 1: the kernel test families on the H200 with §27's race fix
# (docs/cuda_linear_notes.md), which the twenty-first session could not run: linear_kernels_test
# (every family, the dispatcher and graphs with v2 / v3 forced, memcheck) and attention_kernels_test
# (tests, memcheck / racecheck / synccheck / initcheck, bench), both prebuilt here
# (.devpack/kt.tar.xz, from the --build-only modes of cuda_linear_kernels.sh and
# cuda_attention_kernels.sh); then the engine suite (cuda_suite) and a re-sweep of two
# switches whose best value the fix could have moved: the attention's split count and which
# TinyLlama matrices take w4_gemv3.
#   run: command "bash tools/device/session_start22.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-560}
mkdir -p /tmp/kt && tar -xJf .devpack/kt.tar.xz -C /tmp
L=/tmp/s22 && mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
OUT=$L/lin PREBUILT=/tmp/kt/linear_kernels_test SKIP_BENCH=1 timeout 200 \
  bash tools/device/cuda_linear_kernels.sh > $L/lin.log 2>&1
echo "linear kernels rc=$?"; grep -vE '^ *$' $L/lin.log | tail -22
OUT=$L/attn PREBUILT=/tmp/kt/attention_kernels_test timeout 280 \
  bash tools/device/cuda_attention_kernels.sh > $L/attn.log 2>&1
echo "attention kernels rc=$?"; grep -A30 -m1 'SUMMARY\|summary' $L/attn.log | head -30
echo "kernels $(( $(date +%s) - T0 )) s"
cuda_suite $L
echo "tests $(( $(date +%s) - T0 )) s"
MODELS=llama-2-7b ROUNDS=2 ab_tg PERFX_CUDA_ATTN_SPLITS "1 2 4"
MODELS=tinyllama-1.1b ROUNDS=2 ab_tg PERFX_CUDA_ATTN_SPLITS "1 4 8"
MODELS=tinyllama-1.1b ROUNDS=2 ab_tg PERFX_CUDA_GEMV3_MIN_MW "16 0"
tar -czf "$OUT/s22_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
