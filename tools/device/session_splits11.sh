#!/usr/bin/env bash
# With RoPE fused into split-KV and the last-CTA merge (no reduce kernel), does the split cost
# model (which still charges a reduce launch) pick well? tg128 / tg512 on 7B and TinyLlama with
# the model's choice and PERFX_CUDA_ATTN_SPLITS=1 / 2 / 8, one round each. (The call also had an
# arm PERFX_CUDA_SKIP=rope,attn, which run_variants split at the comma into two assignments, so it
# measured nothing; removed.)
#   run: command "bash tools/device/session_splits11.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
V="model=PERFX_CUDA_ATTN_MERGE=1 s1=PERFX_CUDA_ATTN_SPLITS=1 s2=PERFX_CUDA_ATTN_SPLITS=2 s8=PERFX_CUDA_ATTN_SPLITS=8"
run_variants llama-2-7b "$V" 1
run_variants tinyllama-1.1b "$V" 1
for v in model=PERFX_CUDA_ATTN_MERGE=1 s2=PERFX_CUDA_ATTN_SPLITS=2 s16=PERFX_CUDA_ATTN_SPLITS=16; do
  over_budget && continue
  label=${v%%=*}
  env "${v#*=}" timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 512 -r 2 \
    > "$OUT/bench_tg512_$label.md" 2>&1
  echo "7B tg512 $label: $(grep tg512 "$OUT/bench_tg512_$label.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
