#!/usr/bin/env bash
# Twenty-seventh session, call 1 (the binary of 064bbbc, whose rule charged per row at any round
# count and was off by default; the committed rule charges per row only for one-round splits, so
# under it the "7B b8 tg512" pair below compares identical choices): the split-count model's merge
# charge per query row (PERFX_CUDA_ATTN_MERGE_ROWS=1, attn_plan.h merge_charge) against the tile
# charge (0), on every shape whose choice it moved (tests/cuda/attn_emulation_test.cpp,
# check_merge_rows): Llama-2-7B batch 1 at 65-128 keys (1 -> 2 splits), batch 8 at 321-384 and
# 449-512 keys (1 -> 3), and the GQA-4 Mistral-7B shape at batch 1 and 8 (1 -> 2 at 65-128 keys);
# TinyLlama (group 8) as the control the rule must not move. Also QKV_GRID_FREE (linear notes §29)
# with the rule on, where attention's CTA count doubles. Then the CUDA suite with the rule on.
# Arms interleaved; untraced perfx bench.
#   run: command "bash tools/device/session_rows27.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
R0="PERFX_CUDA_ATTN_MERGE_ROWS=0"
R1="PERFX_CUDA_ATTN_MERGE_ROWS=1"
FREE="PERFX_CUDA_QKV_GRID_FREE=32 PERFX_CUDA_QKV_TRIGGER=1"
for round in 1 2; do
  bench_arm "7B tg128 rows=0 r$round" "$R0" llama-2-7b tg128 -p 0 -n 128 -r 3
  bench_arm "7B tg128 rows=1 r$round" "$R1" llama-2-7b tg128 -p 0 -n 128 -r 3
  bench_arm "7B tg128 rows=1 free32 r$round" "$R1 $FREE" llama-2-7b tg128 -p 0 -n 128 -r 3
  bench_arm "mistral tg128 rows=0 r$round" "$R0" mistral-7b tg128 -p 0 -n 128 -r 3
  bench_arm "mistral tg128 rows=1 r$round" "$R1" mistral-7b tg128 -p 0 -n 128 -r 3
done
for round in 1 2; do
  bench_arm "7B b8 tg512 rows=0 r$round" "$R0" llama-2-7b "tg512 x8" -p 0 -n 512 -B 8 -r 1
  bench_arm "7B b8 tg512 rows=1 r$round" "$R1" llama-2-7b "tg512 x8" -p 0 -n 512 -B 8 -r 1
done
for round in 1 2; do
  bench_arm "mistral b8 tg128 rows=0 r$round" "$R0" mistral-7b "tg128 x8" -p 0 -n 128 -B 8 -r 2
  bench_arm "mistral b8 tg128 rows=1 r$round" "$R1" mistral-7b "tg128 x8" -p 0 -n 128 -B 8 -r 2
done
bench_arm "mistral tg128 rows=1 free16" "$R1 PERFX_CUDA_QKV_GRID_FREE=16 PERFX_CUDA_QKV_TRIGGER=1" \
  mistral-7b tg128 -p 0 -n 128 -r 3
bench_arm "tiny tg128 rows=0 (control)" "$R0" tinyllama-1.1b tg128 -p 0 -n 128 -r 3
bench_arm "tiny tg128 rows=1 (control)" "$R1" tinyllama-1.1b tg128 -p 0 -n 128 -r 3
echo "benches done at $(( $(date +%s) - T0 )) s"
if [ $(( $(date +%s) - T0 )) -lt 240 ]; then  # the suite's timeouts add up to 350 s
  export PERFX_CUDA_ATTN_MERGE_ROWS=1
  cuda_suite "$OUT"
fi
echo "total $(( $(date +%s) - T0 )) s"
