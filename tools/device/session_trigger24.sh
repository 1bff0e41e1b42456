#!/usr/bin/env bash
# Twenty-fourth session, call 4: where the split-KV attention lets the o projection launch. Today
# at its entry (pdl_trigger first), so o's 256 w4_gemv3 CTAs issue their 8.6 MB weight preload
# while attention's staged K/V tiles and q are still on their way; the third call's trace put
# attention's after-wait time in those bytes' arrival. PERFX_CUDA_ATTN_TRIGGER_TILE=1 (this
# binary only) triggers once the CTA's first tile is in shared memory. 7B three rounds and
# TinyLlama two, interleaved, 7B batch 8; the trace build is the committed code (no knob). Then
# the attention kernel tests with the knob, memcheck / racecheck, conformance and model tests
# under it.
#   run: command "bash tools/device/session_trigger24.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-400}
A=$B/attn/attention_kernels_test
for v in 1 0; do
  PERFX_CUDA_ATTN_TRIGGER_TILE=$v timeout 120 "$A" > "$OUT/attn_t$v.log" 2>&1
  echo "attention kernels, trigger_tile=$v rc=$?: $(grep -m1 SUMMARY "$OUT/attn_t$v.log")"
done
ROUNDS=3 MODELS=llama-2-7b ab_tg PERFX_CUDA_ATTN_TRIGGER_TILE "1 0"
ROUNDS=2 MODELS=tinyllama-1.1b ab_tg PERFX_CUDA_ATTN_TRIGGER_TILE "1 0"
ab_b8 PERFX_CUDA_ATTN_TRIGGER_TILE "1 0"
echo "benches done at $(( $(date +%s) - T0 )) s"
export PERFX_CUDA_ATTN_TRIGGER_TILE=1
attn_san 100 "memcheck racecheck" "(trigger_tile=1)"
cuda_suite "$OUT"
echo "total $(( $(date +%s) - T0 )) s"
