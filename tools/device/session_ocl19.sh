#!/usr/bin/env bash
# Nineteenth session: the OpenCL int8 GEMV with several blocks of rows per work-group (gemv.cl
# -DGEMV_NB, PERFX_OPENCL_GEMV=...bNB), so each work-group's own quantization of x is paid once
# per NB blocks, against the binaries before it (.devbin/old: perfx and perfx_opencl_check built
# at 8177715), on NVIDIA's OpenCL. 1. the bandwidth check (4096 -> 11008, 11008 -> 4096 against
# the copy kernel), tuned, old / new, and loads only (-DGEMV_PROBE) at a forced NB; 2. a sweep of
# forced shapes x NB on the new binary; 3. the OpenCL GEMV tests, the linear conformance and the
# model tests on NVIDIA; 4. perfx bench tg128 on the 7B and TinyLlama shapes, old vs new,
# interleaved. QUICK=1 skips the probe and the sweep, NO_TESTS=1 the tests.
# One call (the first of the session). The GEMV_NB code was measured no faster (docs/PERFORMANCE.md,
# nineteenth session) and is not in the repository: to rerun, rebuild it from that description.
#   pack: the new perfx / perfx_opencl_check / tests/test_{opencl,conformance,model} and
#         old/{perfx,perfx_opencl_check} in .devbin, tar -cJf .devpack/bin.tar.xz .devbin
#   run:  command "bash tools/device/session_ocl19.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
export PERFX_OPENCL_PLATFORM=nvidia PERFX_REQUIRE_OPENCL=1 PERFX_TEST_DEVICE=opencl
[ -d /work/main ] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
export PERFX_SOURCE_DIR=$ROOT
BUDGET=${BUDGET:-540}
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
[ -n "${QUICK:-}" ] || bw new_probe "$B/perfx_opencl_check" PERFX_OPENCL_BUILD_OPTIONS=-DGEMV_PROBE \
  PERFX_OPENCL_GEMV=${PROBE_SHAPE:-4x2gb4} PERFX_OPENCL_TUNE=0

echo "== sweep (new, forced shapes, no tuning): shape: GEMV us / GB/s / % of copy for both, isolated; b2b: back to back"
[ -n "${QUICK:-}" ] || for shape in ${SWEEP_SHAPES:-4x2g 4x2gb2 4x2gb4 4x2gb8 2x4gb4 8x2gb2 8x2gb4 2x2gb8 4x1gb8 4x2gu4b4}; do
  over_budget && break
  PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_sweep PERFX_OPENCL_GEMV=$shape PERFX_OPENCL_TUNE=0 \
    timeout 60 "$B/perfx_opencl_check" --bandwidth 0 > "$OUT/sw.log" 2>&1
  printf '%-10s %s b2b %s\n' "$shape" \
    "$(grep '^gemv' "$OUT/sw.log" | awk '{printf "%s us %s GB/s %s%% | ", $7, $9, $13}')$(grep -m1 'error' "$OUT/sw.log")" \
    "$(grep 'back to back' "$OUT/sw.log" | sed -E 's/.*gemv +([0-9.]+) us +[0-9.]+ GB\/s +([0-9.]+)%.*/\1 us \2%/' | tr '\n' ' ')"
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
    for arm in old new; do
      over_budget && continue
      bin=$B/perfx; [ $arm = old ] && bin=$B/old/perfx
      PERFX_OPENCL_VERBOSE=1 PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_b$arm timeout 150 "$bin" bench \
        -m "random:$m" --device opencl -p 0 -n 128 -r 3 > "$OUT/b.md" 2> "$OUT/b.log"
      echo "$m $arm r$r: $(grep tg128 "$OUT/b.md" | awk -F'|' '{print $(NF-1)}')"
      [ $r = 1 ] && grep tuned "$OUT/b.log" | sed -E 's/.*tuned gemv:(wf[0-9]+):gs[0-9]+:(in[0-9]+:out[0-9]+).*-> /  \1 \2 -> /'
    done
  done
done
echo "== done in $(( $(date +%s) - T0 )) s"
