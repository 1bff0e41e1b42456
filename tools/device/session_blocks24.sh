#!/usr/bin/env bash
# Twenty-fourth session, call 1: the split-KV attention's earlier keys staged a KV block a copy
# (one tensor-map TMA copy of K and one of V per 16-key block, PagedAttentionArgs::kv_slots)
# instead of one bulk copy a key row (docs/cuda_attention_notes.md, "A block a copy"). The
# attention kernel tests first (block path on by default; then the row path), then tg128 with
# PERFX_CUDA_ATTN_BULK_BLOCKS=1 / 0 interleaved on 7B and TinyLlama, 7B batch 8, and the
# sanitizers, conformance and model tests last.
#   run: command "bash tools/device/session_blocks24.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-470}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
A=$B/attn/attention_kernels_test
for v in 1 0; do
  PERFX_CUDA_ATTN_BULK_BLOCKS=$v timeout 120 "$A" > "$OUT/attn_blocks$v.log" 2>&1
  echo "attention kernels, blocks=$v rc=$?: $(grep -m1 SUMMARY "$OUT/attn_blocks$v.log")"
  grep -m4 '^\[FAIL\]' "$OUT/attn_blocks$v.log" | cut -c1-220
done
ROUNDS=3 ab_tg PERFX_CUDA_ATTN_BULK_BLOCKS "1 0"
ab_b8 PERFX_CUDA_ATTN_BULK_BLOCKS "1 0 1 0"
echo "benches done at $(( $(date +%s) - T0 )) s"
attn_san 100 "memcheck racecheck synccheck"
cuda_suite "$OUT"
echo "total $(( $(date +%s) - T0 )) s"
