#!/usr/bin/env bash
# Thirtieth session, second call: graph captures inside bench's timed repetitions. The CUDA
# backend captures one decode graph per block-table width (1, 2, 4, 8, 16 blocks of 16 tokens over a
# tg128), and bench's tg warm-up ran 16 tokens, so widths 4, 8 and 16 were captured inside the first
# timed repetition. Binaries: perfx_base (dc23d45, the old warm-up), perfx (a short warm-up, then
# one of the test's length where graphs were captured; a note if any capture is left inside the
# timed runs), perfx_mut (perfx without the full-length warm-up: the note's test must fail on it).
# Per-repetition tok/s from -o json's samples_ts (-r 5), interleaved, two rounds; the e2e test on
# perfx and perfx_mut; the CUDA conformance suite (fp16) and model tests on this build.
#   run: command "bash tools/device/session_warmup30.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-330}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# reps LABEL BINARY MODEL [ARGS...]: tg128 -r 5 -o json; prints mean, each repetition's tok/s
# and the mean of repetitions 2-5 (this call's own, in place of devbin.sh's reps).
reps() {
  local label=$1 bin=$2 m=$3
  shift 3
  over_budget && { echo "$label $m: skipped (budget)"; return; }
  timeout 120 "$bin" bench -m "random:$m" --device cuda -p 0 -n 128 -r 5 -o json "$@" \
    > /tmp/r.json 2> /tmp/r.err
  python3 -c '
import json, sys
for t in json.load(open("/tmp/r.json")):
    s = t["samples_ts"]
    rest = s[1:]
    print("%s: mean %.1f | reps %s | reps 2-5 mean %.1f" % (sys.argv[1], t["avg_ts"],
          " ".join("%.1f" % x for x in s), sum(rest) / len(rest)))
' "$label $m" || { echo "$label $m: no json"; head -3 /tmp/r.err; }
  grep -h 'note' /tmp/r.err | head -2
}
for r in 1 2; do
  for m in tinyllama-1.1b llama-2-7b; do
    reps "r$r base" "$B/perfx_base" "$m"
    reps "r$r new " "$B/perfx" "$m"
  done
done
reps "q4 base" "$B/perfx_base" llama-2-7b:q4_0
reps "q4 new " "$B/perfx" llama-2-7b:q4_0
for bin in perfx perfx_mut; do e2e_on "$bin" 'CliBench.NoGraphCapture*'; done
over_budget || cuda_suite "$OUT" f16
echo "total $(( $(date +%s) - T0 )) s"
