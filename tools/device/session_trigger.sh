#!/usr/bin/env bash
# Two questions in one call (docs/cuda_attention_notes.md, docs/cuda_linear_notes.md §18):
#  1. Does the next GEMV's early residency on the attention's SMs cost 7B decode? The split-KV
#     CTAs let the next kernel launch at their end instead of at entry (PERFX_CUDA_ATTN_TRIGGER=
#     late), against the default, with early_kv off as a third arm (its A/B again), 7B and
#     TinyLlama tg128, interleaved, two rounds.
#  2. Which TinyLlama matrices gain from w4_gemv3 inside the PDL chain (where it preloads its
#     weights before the wait, which the bench does not show): the v3 threshold at 16 (default:
#     gate|up only), 11 (+ down), 5 (+ qkv) million weights; tg128, interleaved, two rounds.
# First the attention kernel tests with the late trigger.
#   run: command "bash tools/device/session_trigger.sh", carry [".devpack", ".devshared"]
#   (measured on a working tree between 93c6e6c and ef654e5: PERFX_CUDA_ATTN_TRIGGER exists only in
#   ef654e5, reverted after it; there the early0 arm needs PERFX_CUDA_PDL_EARLY=0, which also moves
#   the norms' γ and the RoPE table after the wait)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
PERFX_CUDA_ATTN_TRIGGER=late timeout 120 "$B/attn/attention_kernels_test" > "$OUT/attn_test.log" 2>&1
echo "attention kernels (late trigger) rc=$?: $(grep -m1 SUMMARY "$OUT/attn_test.log")"
ARMS="default=PERFX_CUDA_ATTN_TRIGGER=entry late=PERFX_CUDA_ATTN_TRIGGER=late early0=PERFX_CUDA_ATTN_EARLY_KV=0"
run_variants llama-2-7b "$ARMS" 2
run_variants tinyllama-1.1b "$ARMS" 2
run_variants tinyllama-1.1b "mw16=PERFX_CUDA_GEMV3_MIN_MW=16 mw11=PERFX_CUDA_GEMV3_MIN_MW=11 mw5=PERFX_CUDA_GEMV3_MIN_MW=5" 2
echo "total $(( $(date +%s) - T0 )) s"
