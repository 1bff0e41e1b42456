#!/usr/bin/env bash
# Twenty-third session, call 3: the split-KV attention reads the new keys' cache slots (their
# block-table entries) before its PDL wait, not in the RoPE + KV store after it
# (docs/cuda_attention_notes.md, "After the wait"). The attention kernel tests
# with every sanitizer (prebuilt, .devpack/kt.tar.xz), the engine suite, traces of the after-wait
# probe points 12 (RoPE + KV store done), 15 (first key tile in shared memory) and 13 (key loop
# done) on both shapes, and tg128 against call 1's binary (.devpack/old.tar.xz), interleaved.
# Ran with a development binary holding the slot read before the wait, reverted after this call
# (-0.8 % on 7B); the probe points it used stayed.
#   run: command "bash tools/device/session_slots23.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-520}
L=/tmp/s23 && mkdir -p $L
mkdir -p /tmp/kt && tar -xJf .devpack/kt.tar.xz -C /tmp
mkdir -p /tmp/old && tar -xJf .devpack/old.tar.xz -C /tmp/old
trace_bin
OUT=$L/attn PREBUILT=/tmp/kt/attention_kernels_test timeout 260 \
  bash tools/device/cuda_attention_kernels.sh > $L/attn.log 2>&1
echo "attention kernels rc=$?"; grep -E '^tests:|^memcheck|^sanitizer|FAIL' $L/attn.log | head -12
cuda_suite $L
echo "tests $(( $(date +%s) - T0 )) s"
for m in llama-2-7b tinyllama-1.1b; do
  for p in 12 15 13; do
    over_budget && continue
    PERFX_CUDA_TRACE_PROBE=$p PERFX_CUDA_TRACE=/tmp/tr.csv timeout 120 /tmp/devtrace/perfx_trace \
      bench -m random:$m --device cuda -p 0 -n 128 -r 2 > /tmp/tb.md 2>&1
    python3 tools/device/trace_summary.py /tmp/tr.csv --steps 6 > "$OUT/trace_${m}_p$p.txt" 2>&1
    echo "$m probe $p traced $(grep tg128 /tmp/tb.md | awk -F'|' '{print $(NF-1)}'): $(grep -E '^attn ' "$OUT/trace_${m}_p$p.txt")"
  done
done
echo "traces $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    tg_line "new r$round" "$B/perfx" "random:$m"
    tg_line "old r$round" /tmp/old/.devbin/perfx "random:$m"
  done
done
tar -czf "$OUT/s23_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
