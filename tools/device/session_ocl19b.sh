#!/usr/bin/env bash
# Nineteenth session, second and third calls: the OpenCL GEMV tuner times each candidate from the
# end of a one-element marker kernel to the GEMV's end (its launch gaps counted, as in a decode
# step; third call: or the enqueue calls' host time where that is longer),
# against the binaries before it (.devbin/old: perfx and perfx_opencl_check built at 8177715), on
# NVIDIA's OpenCL. 1. the bandwidth check (4096 -> 11008, 11008 -> 4096 against the copy kernel),
# tuned, old / new; 2. the OpenCL GEMV, split and error tests and the model tests on
# NVIDIA; 3. perfx bench tg128 on the 7B and TinyLlama shapes, old vs new, interleaved, ROUNDS
# rounds (default 3); ARMS adds "noprof" (the new binary, its queue without profiling:
# PERFX_OPENCL_QUEUE_PROFILING=0, the "new" arm's tuning cache reused). NO_TESTS=1 skips the tests.
# Neither the tuner change nor PERFX_OPENCL_QUEUE_PROFILING is in the repository: decode did not
# gain (docs/PERFORMANCE.md, nineteenth session), so both were reverted; to rerun, rebuild them
# from that description.
#   pack: as session_ocl19.sh (the new binaries from this change)
#   run:  command "bash tools/device/session_ocl19b.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
export PERFX_OPENCL_PLATFORM=nvidia PERFX_REQUIRE_OPENCL=1 PERFX_TEST_DEVICE=opencl
[ -d /work/main ] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
export PERFX_SOURCE_DIR=$ROOT
BUDGET=${BUDGET:-520}
bw() {  # LABEL BINARY [VAR=value ...]
  local label=$1 bin=$2; shift 2
  over_budget && { echo "$label: skipped (budget)"; return; }
  env PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_$label PERFX_OPENCL_VERBOSE=1 "$@" timeout 150 "$bin" \
    --bandwidth 0 > "$OUT/bw_$label.log" 2>&1
  echo "== $label (rc=$?)"
  grep -E '^gemv|tuned|back to back' "$OUT/bw_$label.log" | sed -E 's/\[ -DWF.*-DRPT=/[RPT=/'
}
echo "== env: $(nvidia-smi -L | head -1)"
bw old "$B/old/perfx_opencl_check"
bw new "$B/perfx_opencl_check"

[ -n "${NO_TESTS:-}" ] || {
echo "== tests on NVIDIA OpenCL (new)"
PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t timeout 240 "$B/tests/test_opencl" \
  --gtest_filter='OpenClGemv.*:OpenClErrors.InProcess:OpenClSplit.Linear*' > "$OUT/t_opencl.log" 2>&1
echo "test_opencl rc=$? $(gtest_line "$OUT/t_opencl.log")"
PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t PERFX_TEST_BIN=$B/perfx timeout 200 "$B/tests/test_model" \
  --gtest_filter='*opencl*' > "$OUT/t_model.log" 2>&1
echo "model tests rc=$? $(gtest_line "$OUT/t_model.log")"
grep -E '^\[  FAILED' "$OUT/t_opencl.log" "$OUT/t_model.log" | head -5
}

echo "== perfx bench --device opencl tg128 (old vs new, interleaved)"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for m in llama-2-7b tinyllama-1.1b; do
    for arm in ${ARMS:-old new}; do
      over_budget && continue
      bin=$B/perfx; [ $arm = old ] && bin=$B/old/perfx
      prof=1; cache=$arm; [ $arm = noprof ] && { prof=0; cache=new; }
      PERFX_OPENCL_QUEUE_PROFILING=$prof PERFX_OPENCL_VERBOSE=1 PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_b$cache timeout 150 "$bin" bench \
        -m "random:$m" --device opencl -p 0 -n 128 -r 3 > "$OUT/b.md" 2> "$OUT/b.log"
      echo "$m $arm r$r: $(grep tg128 "$OUT/b.md" | awk -F'|' '{print $(NF-1)}')"
      [ $r = 1 ] && grep tuned "$OUT/b.log" | sed -E 's/.*tuned gemv:(wf[0-9]+):gs[0-9]+:(in[0-9]+:out[0-9]+).*-> /  \1 \2 -> /'
    done
  done
done
echo "== done in $(( $(date +%s) - T0 )) s"
