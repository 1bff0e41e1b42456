#!/usr/bin/env bash
# Thirtieth session, third call: bench without graph captures inside its timed repetitions (a
# full-length tg warm-up where graphs are captured, and the CUDA layout staging starting at 64 Ki
# entries so that its growth no longer re-captures every graph mid-run), against the old bench
# (perfx_base, dc23d45: same kernels). The e2e test that failed on the second call's binary (2
# captures left by the staging growth), on perfx and on perfx_mut (the full warm-up only where the
# short one captured, which misses a later test whose short warm-up finds its graphs cached: the
# test's tg16,40 must fail on it); tg128 -r 5 per repetition (-o json samples_ts) on
# TinyLlama, 7B AWQ and 7B GGUF Q4_0, new and base interleaved; pp512; 7B batch 8; the CUDA
# conformance suite (fp16) and model tests.
#   run: command "bash tools/device/session_steady30.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-380}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for bin in perfx perfx_mut; do
  PERFX_TEST_BIN="$B/$bin" PERFX_TEST_DEVICE=cuda:0 timeout 60 "$B/tests/test_e2e" \
    --gtest_filter='CliBench.NoGraphCapture*' > "$OUT/e2e_$bin.log" 2>&1
  echo "e2e NoGraphCapture on $bin rc=$?: $(gtest_line "$OUT/e2e_$bin.log")"
  grep -m2 'captured' "$OUT/e2e_$bin.log" | cut -c1-200
done
# reps LABEL BINARY MODEL [ARGS...]: -r 5 -o json; mean, sd and each repetition's tok/s per test.
reps() {
  local label=$1 bin=$2 m=$3
  shift 3
  over_budget && { echo "$label $m: skipped (budget)"; return; }
  timeout 120 "$bin" bench -m "random:$m" --device cuda -r 5 -o json "$@" > /tmp/r.json 2> /tmp/r.err
  python3 -c '
import json, sys
for t in json.load(open("/tmp/r.json")):
    s = t["samples_ts"]
    name = ("pp%d" % t["n_prompt"]) if t["n_prompt"] else ("tg%d x%d" % (t["n_gen"], t["n_batch_seqs"]))
    print("%s %s: %.1f ± %.1f | reps %s" % (sys.argv[1], name, t["avg_ts"], t["stddev_ts"],
          " ".join("%.1f" % x for x in s)))
' "$label $m" || { echo "$label $m: no json"; head -3 /tmp/r.err; }
  grep -h 'note' /tmp/r.err | head -2
}
for m in tinyllama-1.1b llama-2-7b; do
  reps "new " "$B/perfx" "$m" -p 0 -n 128
  reps "base" "$B/perfx_base" "$m" -p 0 -n 128
done
reps "new " "$B/perfx" llama-2-7b:q4_0 -p 0 -n 128
reps "base" "$B/perfx_base" llama-2-7b:q4_0 -p 0 -n 128
for m in tinyllama-1.1b llama-2-7b; do
  reps "new " "$B/perfx" "$m" -p 0 -n 128
done
reps "new " "$B/perfx" llama-2-7b -p 0 -n 32 -B 8
reps "new " "$B/perfx" tinyllama-1.1b -p 512 -n 0
reps "new " "$B/perfx" llama-2-7b -p 512 -n 0
if ! over_budget; then
  PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' \
    > "$OUT/conf_f16.log" 2>&1
  echo "conformance f16 rc=$?: $(gtest_line "$OUT/conf_f16.log")"
  PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' \
    > "$OUT/model.log" 2>&1
  echo "model tests rc=$?: $(gtest_line "$OUT/model.log")"
fi
echo "total $(( $(date +%s) - T0 )) s"
