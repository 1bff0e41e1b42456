#!/usr/bin/env bash
# Twenty-seventh session, call 2: the committed default (the per-row merge charge for one-round
# splits on, attn_plan.h merge_charge) — the CUDA suite (conformance fp16 / bf16, model tests),
# then tg128 and pp512 on the issue's two shapes, and the shapes whose split choice call 1
# (session_rows27.sh) moved or kept: Mistral-7B batch 8 tg128 (2 splits) and Llama-2-7B batch 8
# tg512 (1 split). Untraced perfx bench.
#   run: command "bash tools/device/session_final27.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
cuda_suite "$OUT"
for round in 1 2; do
  bench_arm "7B tg128 r$round" "" llama-2-7b tg128 -p 0 -n 128 -r 3
  bench_arm "tiny tg128 r$round" "" tinyllama-1.1b tg128 -p 0 -n 128 -r 3
done
bench_arm "7B pp512" "" llama-2-7b pp512 -p 512 -n 0 -r 3
bench_arm "tiny pp512" "" tinyllama-1.1b pp512 -p 512 -n 0 -r 3
bench_arm "mistral b8 tg128" "" mistral-7b "tg128 x8" -p 0 -n 128 -B 8 -r 2
bench_arm "mistral tg128" "" mistral-7b tg128 -p 0 -n 128 -r 3
bench_arm "7B b8 tg512" "" llama-2-7b "tg512 x8" -p 0 -n 512 -B 8 -r 1
echo "total $(( $(date +%s) - T0 )) s"
