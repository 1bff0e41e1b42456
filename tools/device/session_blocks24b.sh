#!/usr/bin/env bash
# Twenty-fourth session, call 2: with the earlier keys staged a KV block a copy (call 1: 7B +1.5 %),
# do the levers that fewer copies could change move now? 7B tg128, interleaved, three rounds:
# default (blocks), two splits (PERFX_CUDA_ATTN_SPLITS=2), room for attention beside the QKV GEMV
# (PERFX_CUDA_QKV_GRID_FREE=32, trigger 1), and the row-copy control (PERFX_CUDA_ATTN_BULK_BLOCKS=0);
# TinyLlama blocks 1 / 0 twice more. Then the trace build (.devpack/trace.tar.xz): 7B attention's
# probe points 2 (staging issued), 12 (RoPE + KV store done) and 15 (first tile in shared memory)
# with blocks 1 and 0.
#   run: command "bash tools/device/session_blocks24b.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
run_variants llama-2-7b "blocks=PERFX_CUDA_ATTN_BULK_BLOCKS=1 splits2=PERFX_CUDA_ATTN_SPLITS=2 free32=PERFX_CUDA_QKV_GRID_FREE=32,PERFX_CUDA_QKV_TRIGGER=1 rows=PERFX_CUDA_ATTN_BULK_BLOCKS=0" 3
MODELS=tinyllama-1.1b ROUNDS=2 ab_tg PERFX_CUDA_ATTN_BULK_BLOCKS "1 0"
echo "benches done at $(( $(date +%s) - T0 )) s"
trace_bin
for v in 1 0; do
  for p in 2 12 15; do
    over_budget && continue
    PERFX_CUDA_ATTN_BULK_BLOCKS=$v PERFX_CUDA_TRACE_PROBE=$p PERFX_CUDA_TRACE=/tmp/tr.csv timeout 100 \
      /tmp/devtrace/perfx_trace bench -m random:llama-2-7b --device cuda -p 0 -n 128 -r 1 > /tmp/tb.md 2>&1
    python3 tools/device/trace_summary.py /tmp/tr.csv --steps 6 > "$OUT/trace_blocks${v}_p$p.txt" 2>&1
    echo "blocks=$v probe $p traced $(grep tg128 /tmp/tb.md | awk -F'|' '{print $(NF-1)}'): $(grep -E '^attn ' "$OUT/trace_blocks${v}_p$p.txt")"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
