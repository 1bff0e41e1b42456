#!/usr/bin/env bash
# The tenth session's closing call (docs/cuda_attention_notes.md, "Reads before the PDL wait"): the
# attention kernel tests, memcheck / racecheck over their --quick set, the CUDA conformance suite
# (fp16 and bf16) and memcheck over it, the CUDA model tests, then tg128 on the 7B / TinyLlama
# shapes in four arms, interleaved, two rounds:
#   new    the defaults of ef654e5 (early reads before the PDL wait, attention triggers at its end)
#   early0 PERFX_CUDA_PDL_EARLY=0 (norm γ, RoPE table and older keys after the wait)
#   entry  PERFX_CUDA_ATTN_TRIGGER=entry
#   old    both (the session's starting point)
# and 7B batch 8 for new / old.
#   run: command "bash tools/device/session_final10.sh", carry [".devpack", ".devshared"]
#   (measured on the code of commit ef654e5; after it PERFX_CUDA_ATTN_TRIGGER is gone and "entry" is the rule)
#   SKIP_TESTS=1 (only the benches), BUDGET=seconds (540), ARMS="LABEL=ENV[,ENV] ..." and ROUNDS
#   override the arms (the final binary's check: ARMS="new=PERFX_CUDA_PDL_EARLY=1
#   old=PERFX_CUDA_PDL_EARLY=0" ROUNDS=2)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  attn_checks
fi
echo "tests done at $(( $(date +%s) - T0 )) s"
ARMS=${ARMS:-"new=PERFX_CUDA_PDL_EARLY=1 early0=PERFX_CUDA_PDL_EARLY=0 entry=PERFX_CUDA_ATTN_TRIGGER=entry old=PERFX_CUDA_PDL_EARLY=0,PERFX_CUDA_ATTN_TRIGGER=entry"}
run_variants tinyllama-1.1b "$ARMS" "${ROUNDS:-2}"
run_variants llama-2-7b "$ARMS" "${ROUNDS:-2}"
for v in "new=PERFX_CUDA_PDL_EARLY=1" "old=PERFX_CUDA_PDL_EARLY=0,PERFX_CUDA_ATTN_TRIGGER=entry"; do
  over_budget && continue
  label=${v%%=*}
  envs=${v#*=}
  env ${envs//,/ } timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 \
    > "$OUT/bench_b8_$label.md" 2>&1
  echo "7B batch 8 $label: $(grep -E 'tg32' "$OUT/bench_b8_$label.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
