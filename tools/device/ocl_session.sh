# Sourced (from the repository root, after tools/device/devbin.sh) by the OpenCL session scripts
# (session_ocl18.sh, session_ocl19.sh, session_ocl19b.sh): NVIDIA's OpenCL platform required, the
# OpenCL device for the tests, the kernel sources from the checkout; and the helpers below, each
# skipping what would start past BUDGET (over_budget). Timeouts: BW_TIMEOUT (default 150 s) for
# the bandwidth checks, BENCH_TIMEOUT (default 150 s) for a bench run.
export PERFX_OPENCL_PLATFORM=nvidia PERFX_REQUIRE_OPENCL=1 PERFX_TEST_DEVICE=opencl
[ -d /work/main ] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
export PERFX_SOURCE_DIR=$ROOT

# ocl_bw LABEL BINARY [VAR=value ...]: BINARY --bandwidth 0 (perfx_opencl_check: both GEMV shapes
# against the copy kernel) with its own kernel cache and the variables set; prints the GEMV,
# back-to-back and tuning lines. Log in $OUT/bw_LABEL.log.
ocl_bw() {
  local label=$1 bin=$2; shift 2
  over_budget && { echo "$label: skipped (budget)"; return; }
  env PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_$label PERFX_OPENCL_VERBOSE=1 "$@" \
    timeout "${BW_TIMEOUT:-150}" "$bin" --bandwidth 0 > "$OUT/bw_$label.log" 2>&1
  echo "== $label (rc=$?)"
  grep -E '^gemv|tuned|back to back' "$OUT/bw_$label.log" | sed -E 's/\[ -DWF.*-DRPT=/[RPT=/'
}

# ocl_sweep_line LABEL VAR=value ...: one forced, untuned bandwidth check of the new binary
# ($B/perfx_opencl_check) with the variables set (a shape: PERFX_OPENCL_GEMV=...); prints LABEL,
# each shape's isolated µs / GB/s / % of copy and, after "b2b", its back-to-back µs and %.
ocl_sweep_line() {
  local label=$1; shift
  env PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_sweep PERFX_OPENCL_TUNE=0 "$@" \
    timeout 60 "$B/perfx_opencl_check" --bandwidth 0 > "$OUT/sw.log" 2>&1
  printf '%-10s %s b2b %s\n' "$label" \
    "$(grep '^gemv' "$OUT/sw.log" | awk '{printf "%s us %s GB/s %s | ", $7, $9, $14}')$(grep -m1 'error' "$OUT/sw.log")" \
    "$(grep 'back to back' "$OUT/sw.log" | sed -E 's/.*gemv +([0-9.]+) us +[0-9.]+ GB\/s +([0-9.]+)%.*/\1 us \2%/' | tr '\n' ' ')"
}

# ocl_tests SUITE ...: the new binary's OpenCL tests on NVIDIA, one line each; SUITE is opencl
# (test_opencl: the GEMV, split and error cases; TEST_OPENCL_TIMEOUT, default 200 s), conformance
# (the linear cases) or model (greedy goldens, parity); then the first failures.
ocl_tests() {
  local s logs=()
  echo "== tests on NVIDIA OpenCL (new)"
  for s in "$@"; do
    case $s in
      opencl)
        PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t timeout "${TEST_OPENCL_TIMEOUT:-200}" \
          "$B/tests/test_opencl" --gtest_filter='OpenClGemv.*:OpenClErrors.InProcess:OpenClSplit.Linear*' \
          > "$OUT/t_opencl.log" 2>&1
        echo "test_opencl rc=$? $(gtest_line "$OUT/t_opencl.log")" ;;
      conformance)
        PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t timeout 200 "$B/tests/test_conformance" \
          --gtest_filter='*Linear*opencl*' > "$OUT/t_conf.log" 2>&1
        echo "conformance Linear rc=$? $(gtest_line "$OUT/t_conf.log")" ;;
      model)
        PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_t PERFX_TEST_BIN=$B/perfx timeout 200 "$B/tests/test_model" \
          --gtest_filter='*opencl*' > "$OUT/t_model.log" 2>&1
        echo "model tests rc=$? $(gtest_line "$OUT/t_model.log")" ;;
    esac
    logs+=("$OUT/t_$([ "$s" = conformance ] && echo conf || echo "$s").log")
  done
  grep -E '^\[  FAILED' "${logs[@]}" | head -5
}

# ocl_bench MODEL ARM ROUND BINARY CACHE [VAR=value ...]: one perfx bench tg128 of random:MODEL on
# the OpenCL device with the variables set and the tuning cache /tmp/oclcache_bCACHE, printed as
# "MODEL ARM rROUND: t/s ± sd"; in round 1 also the GEMV shapes the tuner chose.
ocl_bench() {
  local m=$1 arm=$2 r=$3 bin=$4 cache=$5; shift 5
  over_budget && return
  env PERFX_OPENCL_VERBOSE=1 PERFX_OPENCL_CACHE_DIR=/tmp/oclcache_b$cache "$@" \
    timeout "${BENCH_TIMEOUT:-150}" "$bin" bench -m "random:$m" --device opencl -p 0 -n 128 -r 3 \
    > "$OUT/b.md" 2> "$OUT/b.log"
  echo "$m $arm r$r: $(grep tg128 "$OUT/b.md" | awk -F'|' '{print $(NF-1)}')"
  [ "$r" = 1 ] && grep tuned "$OUT/b.log" | sed -E 's/.*tuned gemv:(wf[0-9]+):gs[0-9]+:(in[0-9]+:out[0-9]+).*-> /  \1 \2 -> /'
  return 0
}
