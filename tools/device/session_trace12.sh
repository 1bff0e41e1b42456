#!/usr/bin/env bash
# Where a decode step's time goes inside the PDL-chained graph: perfx built with
# -DPERFX_CUDA_TRACE=ON (.devpack/trace.tar.xz: perfx_trace, see tools/device/pack_trace.sh) runs
# tg128 on the random Llama-2-7B and TinyLlama-1.1B shapes with PERFX_CUDA_TRACE=FILE; every
# instrumented kernel's CTAs stamp %globaltimer at start, at their PDL wait's return and at end
# (src/backend/cuda/trace.cuh). tools/device/trace_summary.py prints each op's share of the step's
# critical path over the last complete steps. The same binary without the variable, and the plain
# perfx, give the tracing's own cost (ARMS=trace_on: the traced run alone). $OUT gets 2 files a
# model (8 come back).
#   run: command "bash tools/device/session_trace12.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
trace_bin
for m in ${MODELS:-llama-2-7b tinyllama-1.1b}; do
  over_budget && continue
  for arm in ${ARMS:-plain trace_off trace_on}; do
    case $arm in
      plain) bin=$B/perfx; envs= ;;
      trace_off) bin=$PT; envs= ;;
      trace_on) bin=$PT; envs="PERFX_CUDA_TRACE=/tmp/trace_$m.csv" ;;
    esac
    env $envs timeout 120 "$bin" bench -m random:$m --device cuda -p 0 -n ${NG:-128} -r 2 \
      > "/tmp/bench_${m}_$arm.md" 2> "/tmp/bench_${m}_$arm.err"
    echo "$m $arm: $(grep -E "tg${NG:-128}" "/tmp/bench_${m}_$arm.md" | awk -F'|' '{print $(NF-1)}') $(grep -m1 -i 'error\|TRACE' "/tmp/bench_${m}_$arm.err")"
  done
  python3 tools/device/trace_summary.py /tmp/trace_$m.csv --steps ${STEPS:-4} --timeline \
    > "$OUT/trace_summary_$m.txt" 2>&1
  sed -n '1,40p' "$OUT/trace_summary_$m.txt"
  xz -T4 -c /tmp/trace_$m.csv > "$OUT/trace_$m.csv.xz"
done
echo "total $(( $(date +%s) - T0 )) s"
