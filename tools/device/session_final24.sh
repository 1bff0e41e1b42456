#!/usr/bin/env bash
# Twenty-fourth session, call 5: the final binary (block copies with the review's mends: kv_slots
# validated as whole blocks, the driver's encoder looked up at init) — attention kernel tests,
# memcheck / racecheck / synccheck over their quick set, CUDA conformance fp16 / bf16, CUDA model
# tests, then tg128 on 7B and TinyLlama and pp512 on both (one run each).
#   run: command "bash tools/device/session_final24.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
A=$B/attn/attention_kernels_test
timeout 120 "$A" > "$OUT/attn.log" 2>&1
echo "attention kernels rc=$?: $(grep -m1 SUMMARY "$OUT/attn.log")"
grep -m4 '^\[FAIL\]' "$OUT/attn.log" | cut -c1-220
attn_san 100 "memcheck racecheck synccheck"
cuda_suite "$OUT"
for m in llama-2-7b tinyllama-1.1b; do
  tg_line final "$B/perfx" "random:$m"
  over_budget && continue
  timeout 90 "$B/perfx" bench -m "random:$m" --device cuda -p 512 -n 0 -r 3 > "$OUT/pp_$m.md" 2>&1
  echo "final $m pp512: $(grep pp512 "$OUT/pp_$m.md" | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
