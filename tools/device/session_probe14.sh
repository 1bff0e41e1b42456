#!/usr/bin/env bash
# Fourteenth session, last call: what the split-KV attention kernel's prologue spends its ~6 µs on
# (docs/cuda_linear_notes.md §23). The trace build (tools/device/pack_trace.sh,
# .devpack/trace.tar.xz) runs tg128 on the random Llama-2-7B and TinyLlama-1.1B shapes with
# PERFX_CUDA_TRACE_PROBE unset (t_prewait at the PDL wait's entry), 1 (after the batch layout is
# read) and 2 (after the earlier keys' K/V staging is issued); trace_summary.py's "pre" column is
# then each CTA's start → that point (median).
# Ran the trace build of commit c545de1 (c592eb5's engine plus the probe points).
#   run: command "bash tools/device/session_probe14.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
trace_bin
for m in llama-2-7b tinyllama-1.1b; do
  for p in 0 1 2; do
    envs="PERFX_CUDA_TRACE=/tmp/trace_${m}_$p.csv"
    [ "$p" != 0 ] && envs="$envs PERFX_CUDA_TRACE_PROBE=$p"
    env $envs timeout 120 "$PT" bench -m random:$m --device cuda -p 0 -n 128 -r 2 \
      > /tmp/tb_${m}_$p.md 2>&1
    python3 tools/device/trace_summary.py /tmp/trace_${m}_$p.csv --steps 4 \
      > "$OUT/probe_${m}_$p.txt" 2>&1
    echo "$m probe $p: $(grep tg128 /tmp/tb_${m}_$p.md | awk -F'|' '{print $(NF-1)}')"
    grep -E "^op |^attn |^qkv |^o " "$OUT/probe_${m}_$p.txt"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
