#!/usr/bin/env bash
# The split-KV kernel's last CTA merges the splits (PagedAttentionArgs::split_counters; no reduce
# kernel; docs/cuda_attention_notes.md): the attention kernel tests (kAuto with and without the
# counters, the fused-RoPE cases against the two kernels + reduce bit for bit), memcheck /
# racecheck over --quick, conformance fp16 / bf16 + memcheck, the CUDA model tests; then tg128 on
# 7B and TinyLlama with PERFX_CUDA_ATTN_MERGE=1 / 0 interleaved, two rounds, 7B batch 8 both ways,
# and tg512 once each way (more splits per sequence).
#   run: command "bash tools/device/session_merge.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
attn_checks
echo "merge cases passed: $(grep -c '^\[PASS\] attn/merge' "$OUT/attn_test.log"), fused: $(grep -c '^\[PASS\] fused' "$OUT/attn_test.log")"
grep -m3 'split counters' "$OUT/attn_test.log" | cut -c1-200
echo "tests done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_ATTN_MERGE "1 0"
ab_b8 PERFX_CUDA_ATTN_MERGE "1 0"
for v in 1 0; do
  over_budget && continue
  PERFX_CUDA_ATTN_MERGE=$v timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 512 -r 2 \
    > "$OUT/bench_tg512_$v.md" 2>&1
  echo "7B tg512 PERFX_CUDA_ATTN_MERGE=$v: $(grep tg512 "$OUT/bench_tg512_$v.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
