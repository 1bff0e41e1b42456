#!/usr/bin/env bash
# Eleventh session's closing check of the final binary: the attention kernel tests (fused RoPE,
# last-CTA merge, the multi-token cases), memcheck / racecheck over --quick, conformance fp16 / bf16
# (+ memcheck), the CUDA model tests; then tg128 with the defaults ("new") against RoPE unfused and
# the reduce kernel ("old": the session's start), interleaved, two rounds on 7B and TinyLlama;
# tg512 and batch 8 both ways once; and the 7B Q4_0 shape's decode with the defaults.
#   run: command "bash tools/device/session_final11.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
attn_checks
echo "tests done at $(( $(date +%s) - T0 )) s"
ARMS="new=PERFX_CUDA_ROPE_FUSED=1 old=PERFX_CUDA_ROPE_FUSED=0,PERFX_CUDA_ATTN_MERGE=0"
run_variants llama-2-7b "$ARMS" 2
run_variants tinyllama-1.1b "$ARMS" 2
for v in $ARMS; do
  over_budget && continue
  label=${v%%=*}
  envs=${v#*=}
  env ${envs//,/ } timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 512 -r 2 \
    > "$OUT/bench_tg512_$label.md" 2>&1
  echo "7B tg512 $label: $(grep tg512 "$OUT/bench_tg512_$label.md" | awk -F'|' '{print $(NF-1)}')"
  env ${envs//,/ } timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 \
    > "$OUT/bench_b8_$label.md" 2>&1
  echo "7B batch 8 $label: $(grep tg32 "$OUT/bench_b8_$label.md" | awk -F'|' '{print $(NF-1)}')"
done
over_budget || { timeout 90 "$B/perfx" bench -m random:llama-2-7b:q4_0 --device cuda -p 0 -n 128 -r 3 \
  > "$OUT/bench_q4_0.md" 2>&1; echo "7B Q4_0 tg128: $(grep tg128 "$OUT/bench_q4_0.md" | awk -F'|' '{print $(NF-1)}')"; }
echo "total $(( $(date +%s) - T0 )) s"
