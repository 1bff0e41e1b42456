#!/usr/bin/env bash
# What separates w4_gemv3 from its loads-only probe (docs/cuda_linear_notes.md §16), on the H200
# in one call: the GEMV family's correctness cases (experiment bits included) and memcheck over the
# reduced set; the w4_gemv3 kernel bench (--bench-v3) with the probe loading records and
# activations too (probe-full, probe-full2 = + the activation prefetch) and the kernel with
# records as streamed loads (exp1), an L1 prefetch of the activations (exp2) or both (exp3); then
# 7B / TinyLlama tg128 per PERFX_CUDA_GEMV3_EXP, interleaved, two rounds, and 7B batch 8.
#   run: command "bash tools/device/session_gap.sh", carry [".devpack", ".devshared"]
#   (needs the code of the commit that added this script: the experiment was reverted after it)
#   EXPS="1 2 3" (default), SKIP_KERNELS=1 (only the model benches), BUDGET=seconds (540)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/perfx_out}
mkdir -p "$OUT"
. tools/device/devbin.sh
export PERFX_SHARED_DIR=$ROOT/.devshared
T0=$(date +%s)
T=$B/lin/linear_kernels_test
line() { printf "%-22s rc=%-3s pass %4s fail %3s %s\n" "$1" "$2" "$(grep -c '^PASS' "$3")" \
  "$(grep -c '^FAIL' "$3")" "$(grep -m1 -E '^FATAL|error' "$3" | cut -c1-150)"; }
if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  timeout 90 "$T" --only gemv > "$OUT/test_gemv.log" 2>&1
  line gemv $? "$OUT/test_gemv.log"
  for e in 1 2 3; do
    echo "  exp$e cases: pass $(grep '^PASS' "$OUT/test_gemv.log" | grep -c "/exp$e ") fail $(grep '^FAIL' "$OUT/test_gemv.log" | grep -c "/exp$e ")"
  done
  grep '^FAIL' "$OUT/test_gemv.log" | head -6 | cut -c1-200
  for fam in auto graph; do
    PERFX_CUDA_W4_GEMV=v3 PERFX_CUDA_GEMV3_EXP=3 timeout 60 "$T" --only $fam > "$OUT/test_${fam}_exp3.log" 2>&1
    line "$fam (v3, exp 3)" $? "$OUT/test_${fam}_exp3.log"
  done
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$T" --quick --only gemv \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck gemv --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log"))"
  timeout 150 "$T" --bench-v3 > "$OUT/bench_v3.log" 2>&1
  echo "bench rc=$?"
  grep -m1 "device-to-device" "$OUT/bench_v3.log"
  sed -n '/^== w4_gemv3/,/^$/p' "$OUT/bench_v3.log"
fi
echo "kernels done at $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for e in 0 ${EXPS:-1 2 3}; do
      [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-540} ] && continue
      f="$OUT/bench_${m}_exp${e}_r$round.md"
      PERFX_CUDA_GEMV3_EXP=$e timeout 90 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 > "$f" 2>&1
      echo "$m exp $e round $round: $(grep tg128 "$f" | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
for e in 0 ${EXPS:-1 2 3}; do
  [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-540} ] && continue
  f="$OUT/bench_b8_exp$e.md"
  PERFX_CUDA_GEMV3_EXP=$e timeout 90 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 32 -B 8 -r 2 > "$f" 2>&1
  echo "7B batch 8 exp $e: $(grep -E 'tg32' "$f" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
