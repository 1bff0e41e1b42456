#!/usr/bin/env bash
# RoPE + KV store fused into the split-KV decode kernel (PagedAttentionArgs::rope, the backend's
# rope_kv_attention; docs/cuda_attention_notes.md): the attention kernel tests (the "fused" cases
# compare it bit for bit with the two kernels), memcheck and racecheck over --quick, CUDA
# conformance (RopeKvAttention among them) in fp16 and bf16 with memcheck, the CUDA model tests;
# then tg128 on 7B and TinyLlama with PERFX_CUDA_ROPE_FUSED=1 / 0 interleaved, two rounds, and 7B
# batch 8 both ways.
#   run: command "bash tools/device/session_ropefuse.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
attn_checks
grep -c '^\[PASS\] fused' "$OUT/attn_test.log" | sed 's/^/fused cases passed: /'
grep -m3 '^\[FAIL\] fused' "$OUT/attn_test.log" | cut -c1-220
echo "tests done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_ROPE_FUSED "1 0"
ab_b8 PERFX_CUDA_ROPE_FUSED "1 0"
echo "total $(( $(date +%s) - T0 )) s"
