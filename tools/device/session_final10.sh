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
A=$B/attn/attention_kernels_test
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 120 "$A" > "$OUT/attn_test.log" 2>&1
  echo "attention kernels rc=$?: $(grep -m1 SUMMARY "$OUT/attn_test.log")"
  grep -m4 '^\[FAIL\]' "$OUT/attn_test.log" | cut -c1-220
  for tool in memcheck racecheck; do
    timeout 120 "$SAN" --tool $tool --error-exitcode 7 "$A" --quick > "$OUT/attn_$tool.log" 2>&1
    echo "attention $tool --quick rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/attn_$tool.log" | tail -1)"
  done
  for dt in f16 bf16; do
    PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
      --gtest_filter='*cuda*' > "$OUT/conf_$dt.log" 2>&1
    echo "conformance $dt rc=$?: $(gtest_line "$OUT/conf_$dt.log")"
  done
  PERFX_TEST_DEVICE=cuda:0 PERFX_CUDA_GRAPHS=0 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 \
    "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$OUT/conf_memcheck.log" 2>&1
  echo "conformance memcheck rc=$?: $(grep -m1 'ERROR SUMMARY' "$OUT/conf_memcheck.log")"
  PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > "$OUT/model.log" 2>&1
  echo "model rc=$?: $(gtest_line "$OUT/model.log")"
  grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" | head -6 | cut -c1-220
fi
echo "tests done at $(( $(date +%s) - T0 )) s"
# run_variants MODEL "LABEL=ENV[,ENV] ..." ROUNDS: tg128 once per variant per round, interleaved.
run_variants() {
  local m=$1 variants=$2 rounds=$3 r v label envs f
  for r in $(seq 1 "$rounds"); do
    for v in $variants; do
      over_budget && continue
      label=${v%%=*}
      envs=${v#*=}
      f="$OUT/bench_${m}_${label}_r$r.md"
      env ${envs//,/ } timeout 90 "$B/perfx" bench -m "random:$m" --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
      echo "$m $label round $r: $(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')"
    done
  done
}
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
