#!/usr/bin/env bash
# Fourteenth session, fourth call: why NormLink on the 7B o → gate|up pair costs ~8 µs a layer
# (tools/device/session_attn14.sh: 495 vs 567 tok/s). The trace build (tools/device/pack_trace.sh,
# .devpack/trace.tar.xz) runs tg128 on the random Llama-2-7B shape with PERFX_CUDA_NORM_LINK=0
# and =1; tools/device/trace_summary.py prints each op's share of the critical path and one
# step's timeline.
# Ran with development binaries of the NormLink experiment (final code: commit f9e8d00, run by
# session_link14b.sh); NormLink and PERFX_CUDA_ATTN_TRIGGER were reverted after it.
#   run: command "bash tools/device/session_trace14.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
trace_bin
for link in 0 1; do
  PERFX_CUDA_NORM_LINK=$link PERFX_CUDA_TRACE=/tmp/trace_$link.csv timeout 120 "$PT" bench \
    -m random:${MODEL:-llama-2-7b} --device cuda -p 0 -n 128 -r 2 > /tmp/tb_$link.md 2>&1
  echo "NORM_LINK=$link traced: $(grep tg128 /tmp/tb_$link.md | awk -F'|' '{print $(NF-1)}')"
  python3 tools/device/trace_summary.py /tmp/trace_$link.csv --steps 4 --timeline \
    > "$OUT/trace_summary_link$link.txt" 2>&1
  sed -n '4,18p;/timeline/,$p' "$OUT/trace_summary_link$link.txt" | head -34
done
echo "total $(( $(date +%s) - T0 )) s"
