#!/usr/bin/env bash
# Twenty-sixth session, call 2: why PERFX_CUDA_NORM_FUSE=1 lost on TinyLlama (call 1,
# session_norm25.sh: tg128 1,703 vs 1,761 tok/s). The trace build (tools/device/pack_trace.sh,
# .devpack/trace.tar.xz, from the same commit) runs TinyLlama tg128 with the knob off and on;
# trace_summary.py prints each op's critical share, span, wait and after-wait time.
# (As run in the twenty-sixth session it wrote one summary per arm, the second run overwriting
# the first; it now keeps both.)
#   run: command "bash tools/device/session_norm25b.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
trace_bin
for run in 1 2; do for v in 0 1; do
  over_budget && { echo "skipped (budget)"; continue; }
  f=/tmp/trace_$v.csv
  PERFX_CUDA_NORM_FUSE=$v PERFX_CUDA_TRACE=$f timeout 120 "$PT" bench -m random:tinyllama-1.1b \
    --device cuda -p 0 -n 128 -r 2 > /tmp/tb_$v.md 2>&1
  echo "== NORM_FUSE=$v traced tg128: $(grep tg128 /tmp/tb_$v.md | awk -F'|' '{print $(NF-1)}')"
  python3 tools/device/trace_summary.py $f --steps 6 --timeline > "$OUT/trace_fuse${v}_r$run.txt" 2>&1
  sed -n '1,24p' "$OUT/trace_fuse${v}_r$run.txt"
done; done
echo "total $(( $(date +%s) - T0 )) s"
