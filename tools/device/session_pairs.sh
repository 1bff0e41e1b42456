#!/usr/bin/env bash
# early_kv only where attention is few CTAs (n_seqs * n_kv_heads <= 32 by default;
# PERFX_CUDA_ATTN_EARLY_PAIRS=N; docs/cuda_attention_notes.md): the attention kernel tests (the GPU
# test now asks for early_kv), memcheck over their --quick set, CUDA conformance and model tests,
# then 7B batch 8 (tg32 x 8) with the limit (early_kv off there), without it (on) and with every
# early read off (PERFX_CUDA_PDL_EARLY=0), interleaved, two rounds; and 7B / TinyLlama tg128 with
# the defaults and with PERFX_CUDA_PDL_EARLY=0, one round.
#   run: command "bash tools/device/session_pairs.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
attn_checks  # (its call ran a subset: no racecheck, fp16 conformance only, no memcheck over it)
echo "tests done at $(( $(date +%s) - T0 )) s"
for r in 1 2; do
  for v in "limit32=PERFX_CUDA_PDL_EARLY=1" "all=PERFX_CUDA_ATTN_EARLY_PAIRS=1000000" "off=PERFX_CUDA_PDL_EARLY=0"; do
    over_budget && continue
    label=${v%%=*}
    env "${v#*=}" timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 \
      > "$OUT/bench_b8_${label}_r$r.md" 2>&1
    echo "7B batch 8 $label round $r: $(grep -E 'tg32' "$OUT/bench_b8_${label}_r$r.md" | awk -F'|' '{print $(NF-1)}')"
  done
done
ROUNDS=1 ab_tg PERFX_CUDA_PDL_EARLY "1 0"
echo "total $(( $(date +%s) - T0 )) s"
