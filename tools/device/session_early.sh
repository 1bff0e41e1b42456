#!/usr/bin/env bash
# Decode attention that stages the keys of earlier steps before griddepcontrol.wait
# (PagedAttentionArgs::early_kv; PERFX_CUDA_ATTN_EARLY_KV=0 turns it off; docs/cuda_attention_notes.md)
# on the H200 in one call: the attention kernel tests, memcheck and racecheck over their --quick set,
# the CUDA conformance and model tests, then tg128 on the 7B / TinyLlama shapes with early_kv 0 / 1
# interleaved (two rounds), 7B tg512 per value, TinyLlama with w4_gemv3 on every matrix
# (PERFX_CUDA_W4_GEMV=v3 against the default ladder) and the per-step floor (PERFX_CUDA_SKIP: every
# norm, RoPE, attention and linear left out, so embedding + sampling + host + graph launch remain).
#   run: command "bash tools/device/session_early.sh", carry [".devpack", ".devshared"]
#   (needs the code of commit 93c6e6c: PERFX_CUDA_ATTN_EARLY_KV is PERFX_CUDA_PDL_EARLY since)
#   SKIP_TESTS=1 (only the benches), BUDGET=seconds (540)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  attn_checks  # (its call ran a subset: no bf16 conformance, no memcheck over conformance)
fi
echo "tests done at $(( $(date +%s) - T0 )) s"
ab_tg PERFX_CUDA_ATTN_EARLY_KV "0 1"
# one_tg LABEL MODEL N ENV...: perfx bench tgN once (-r 3) with the given environment.
one_tg() {
  local label=$1 m=$2 n=$3 f
  shift 3
  over_budget && return
  f="$OUT/bench_${m}_${label}.md"
  env "$@" timeout 90 "$B/perfx" bench -m "random:$m" --device cuda -p 0 -n "$n" -r 3 > "$f" 2>&1
  echo "$m tg$n $label: $(grep "tg$n" "$f" | awk -F'|' '{print $(NF-1)}')"
}
one_tg early0_tg512 llama-2-7b 512 PERFX_CUDA_ATTN_EARLY_KV=0
one_tg early1_tg512 llama-2-7b 512 PERFX_CUDA_ATTN_EARLY_KV=1
one_tg gemv_v3 tinyllama-1.1b 128 PERFX_CUDA_W4_GEMV=v3
one_tg gemv_default tinyllama-1.1b 128 PERFX_CUDA_ATTN_EARLY_KV=1
one_tg floor tinyllama-1.1b 128 PERFX_CUDA_SKIP=norm,rope,attn,linear
one_tg floor llama-2-7b 128 PERFX_CUDA_SKIP=norm,rope,attn,linear
echo "total $(( $(date +%s) - T0 )) s"
