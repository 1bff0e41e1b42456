#!/usr/bin/env bash
# Fourteenth session, second call: (1) where the step's time goes with NormLink on (the trace
# build of tools/device/pack_trace.sh, .devpack/trace.tar.xz; tools/device/trace_summary.py), on
# the random Llama-2-7B and TinyLlama-1.1B shapes; (2) the PERFX_CUDA_L2_AHEAD experiment
# (docs/cuda_linear_notes.md §23): the o projection's w4_gemv3 hands L2 part of gate|up's weight
# before its PDL wait, while attention leaves DRAM idle — greedy tokens with and without it, then
# tg128 on 7B for SKIP,CAP = off, 9,8 9,16 9,24 (MiB), two rounds interleaved.
# Ran a development binary of the NormLink experiment (f9e8d00 has its final code), with the link
# on by default (on 7B only its down → QKV pair linked then) and the PERFX_CUDA_L2_AHEAD hook,
# which was built into that binary only and never committed (docs/cuda_linear_notes.md §23).
#   run: command "bash tools/device/session_ahead14.sh", carry [".devpack"]
#   (.devpack: bin.tar.xz with perfx; trace.tar.xz; lib/)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-540}
L=/tmp/ahead14 && mkdir -p $L
trace_bin
for m in llama-2-7b tinyllama-1.1b; do
  PERFX_CUDA_TRACE=/tmp/trace_$m.csv timeout 120 "$PT" bench -m random:$m --device cuda -p 0 \
    -n 128 -r 2 > $L/trace_bench_$m.md 2>&1
  echo "$m traced: $(grep tg128 $L/trace_bench_$m.md | awk -F'|' '{print $(NF-1)}')"
  python3 tools/device/trace_summary.py /tmp/trace_$m.csv --steps 4 --timeline \
    > "$OUT/trace_summary_$m.txt" 2>&1
  sed -n '1,32p' "$OUT/trace_summary_$m.txt"
done
for a in 0,0 9,16; do
  PERFX_CUDA_L2_AHEAD=$a timeout 120 "$B/perfx" run -m random:llama-2-7b --device cuda -p "" \
    -n 24 --temp 0 --ignore-eos > $L/run_$a.txt 2> $L/run_$a.err
  echo "run L2_AHEAD=$a rc=$? $(md5sum < $L/run_$a.txt | cut -c1-12) $(head -c 80 $L/run_$a.err)"
done
cmp -s $L/run_0,0.txt $L/run_9,16.txt && echo "greedy output identical" || echo "greedy output DIFFERS"
echo "so far $(( $(date +%s) - T0 )) s"
OUT=$L MODELS=llama-2-7b ROUNDS=2 ab_tg PERFX_CUDA_L2_AHEAD "0,0 9,8 9,16 9,24"
tar -czf "$OUT/ahead14_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
