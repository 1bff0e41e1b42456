#!/usr/bin/env bash
# Eighteenth session: the OpenCL int4 GEMV on int8 activations with its weight loads
# software-pipelined and x quantized by each work-group into local memory (gemv.cl -DACT_LOCAL),
# against the binaries before it (.devbin/old: perfx and perfx_opencl_check built at 5f1c0d0's
# OpenCL code), on NVIDIA's OpenCL. 1. the bandwidth check (4096 -> 11008, 11008 -> 4096 against
# the copy kernel), tuned, old / new / new with PERFX_OPENCL_ACT_LOCAL=0 / loads only
# (-DGEMV_PROBE); 2. a sweep of forced shapes x U on the new binary; 3. the OpenCL GEMV tests, the
# linear conformance and the model tests on NVIDIA; 4. perfx bench tg128 on the 7B and TinyLlama
# shapes, old vs new, interleaved. QUICK=1 skips the ACT_LOCAL=0 and loads-only checks and the
# sweep, NO_TESTS=1 the tests; ARMS="old new apart" picks the bench arms (apart: the new binary
# with PERFX_OPENCL_ACT_LOCAL=0).
# Five calls: the first found the new kernel failing on NVIDIA (its local argument, a float*, not
# 16-byte aligned there; now a float4*) and staged xq from the separate kernel; the second added
# the tuner's cache flush; the third quantized x inside the GEMV; the fourth's tuner also timed
# each shape with x quantized apart (sum of the two kernels' times), the fifth's from the
# quantization's start to the GEMV's end (QUICK=1 NO_TESTS=1 ARMS="new old apart").
#   pack: the new perfx / perfx_opencl_check / tests/test_opencl / tests/test_conformance and
#         old/{perfx,perfx_opencl_check} in .devbin, tar -cJf .devpack/bin.tar.xz .devbin
#   run:  command "bash tools/device/session_ocl18.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
export PERFX_OPENCL_PLATFORM=nvidia PERFX_REQUIRE_OPENCL=1 PERFX_TEST_DEVICE=opencl
[ -d /work/main ] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
export PERFX_SOURCE_DIR=$ROOT
BUDGET=${BUDGET:-530}
bw() {  # LABEL BINARY [VAR=value ...]
  local label=$1 bin=$2; shift 2
  over_budget && { echo "$label: skipped (budget)"; return; }
  env PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_$label PERFX_OPENCL_VERBOSE=1 "$@" timeout 120 "$bin" \
    --bandwidth 0 > "$OUT/bw_$label.log" 2>&1
  echo "== $label (rc=$?)"
  grep -E '^gemv|tuned|back to back' "$OUT/bw_$label.log" | sed -E 's/\[ -DWF.*-DRPT=/[RPT=/'
}
echo "== env: $(nvidia-smi -L | head -1)"
bw old "$B/old/perfx_opencl_check"
bw new "$B/perfx_opencl_check"
if [ -z "${QUICK:-}" ]; then
bw new_global "$B/perfx_opencl_check" PERFX_OPENCL_ACT_LOCAL=0
bw new_probe "$B/perfx_opencl_check" PERFX_OPENCL_BUILD_OPTIONS=-DGEMV_PROBE
bw old_probe "$B/old/perfx_opencl_check" PERFX_OPENCL_BUILD_OPTIONS=-DGEMV_PROBE
fi

echo "== sweep (new, forced shapes, no tuning): shape u: GEMV us / GB/s / % of copy for both"
[ -n "${QUICK:-}" ] || for u in ${SWEEP_U:-1 2}; do  # g2: U 2 with PERFX_OPENCL_ACT_LOCAL=0
  for shape in ${SWEEP_SHAPES:-2x4g 4x2g 8x2g 4x1g 8x1g}; do
    over_budget && break
    PERFX_OPENCL_ACT_LOCAL=$([ $u = g2 ] && echo 0 || echo 1) \
    PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_sweep PERFX_OPENCL_GEMV=${shape}u${u#g} PERFX_OPENCL_TUNE=0 \
      timeout 60 "$B/perfx_opencl_check" --bandwidth 0 > "$OUT/sw.log" 2>&1
    printf '%-6s u%s %s\n' "$shape" "$u" \
      "$(grep '^gemv' "$OUT/sw.log" | awk '{printf "%s us %s GB/s %s%% | ", $7, $9, $13}')$(grep -m1 'error' "$OUT/sw.log")"
  done
done

[ -n "${NO_TESTS:-}" ] || {
echo "== tests on NVIDIA OpenCL (new)"
PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t timeout 200 "$B/tests/test_opencl" \
  --gtest_filter='OpenClGemv.*:OpenClErrors.InProcess:OpenClSplit.Linear*' > "$OUT/t_opencl.log" 2>&1
echo "test_opencl rc=$? $(gtest_line "$OUT/t_opencl.log")"
PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t timeout 200 "$B/tests/test_conformance" \
  --gtest_filter='*Linear*opencl*' > "$OUT/t_conf.log" 2>&1
echo "conformance Linear rc=$? $(gtest_line "$OUT/t_conf.log")"
PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t PERFX_TEST_BIN=$B/perfx timeout 200 "$B/tests/test_model" \
  --gtest_filter='*opencl*' > "$OUT/t_model.log" 2>&1
echo "model tests rc=$? $(gtest_line "$OUT/t_model.log")"
grep -E '^\[  FAILED' "$OUT/t_opencl.log" "$OUT/t_conf.log" "$OUT/t_model.log" | head -5
}

echo "== perfx bench --device opencl tg128 (old vs new, interleaved)"
for r in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for arm in ${ARMS:-old new}; do
      over_budget && continue
      bin=$B/perfx; [ $arm = old ] && bin=$B/old/perfx
      loc=1; [ $arm = apart ] && loc=0
      PERFX_OPENCL_ACT_LOCAL=$loc PERFX_OPENCL_VERBOSE=1 PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_b$arm timeout 120 "$bin" bench \
        -m "random:$m" --device opencl -p 0 -n 128 -r 3 > "$OUT/b.md" 2> "$OUT/b.log"
      echo "$m $arm r$r: $(grep tg128 "$OUT/b.md" | awk -F'|' '{print $(NF-1)}')"
      [ $r = 1 ] && grep tuned "$OUT/b.log" | sed -E 's/.*tuned gemv:(wf[0-9]+):gs[0-9]+:(in[0-9]+:out[0-9]+).*-> /  \1 \2 -> /' 
    done
  done
done
echo "== done in $(( $(date +%s) - T0 )) s"
