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
A=$B/attn/attention_kernels_test
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 120 "$A" > "$OUT/attn_test.log" 2>&1
  echo "attention kernels rc=$?: $(grep -m1 SUMMARY "$OUT/attn_test.log")"
  grep -m4 '^\[FAIL\]' "$OUT/attn_test.log" | cut -c1-220
  for tool in memcheck racecheck; do
    timeout 120 "$SAN" --tool $tool --error-exitcode 7 "$A" --quick > "$OUT/attn_$tool.log" 2>&1
    echo "attention $tool --quick rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/attn_$tool.log" | tail -1)"
  done
  PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf.log" 2>&1
  echo "conformance rc=$?: $(gtest_line "$OUT/conf.log")"
  PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
  echo "model rc=$?: $(gtest_line "$OUT/model.log")"
  grep -h -E "Failure|FAILED" "$OUT/conf.log" "$OUT/model.log" | head -6 | cut -c1-220
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
