#!/usr/bin/env bash
# Twenty-eighth session, for an H200 if one comes (the first call got an H100): the issue's
# figures on the acceptance machine (tg128 and pp512, 7B and TinyLlama AWQ, the default fp16
# lm_head) and --lm-head-type q8_0 / q4_0 against them, interleaved, two rounds.
#   run: command "bash tools/device/session_h200_28.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for r in 1 2; do lm_head_arms fp16 q8_0 q4_0; done
bench_arm "7B pp512" "" llama-2-7b pp512 -p 512 -n 0 -r 3
bench_arm "tiny pp512" "" tinyllama-1.1b pp512 -p 512 -n 0 -r 3
echo "total $(( $(date +%s) - T0 )) s"
