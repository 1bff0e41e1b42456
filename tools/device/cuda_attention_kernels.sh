#!/usr/bin/env bash
# Builds and checks the CUDA attention kernels (src/backend/cuda/attention_*.cu, rope_kv.cu) with
# their standalone test (tests/cuda/attention_kernels_test.cu), then benchmarks them.
# Run from the repo root on the GPU machine (nvcc 13.0 at /usr/local/cuda, sm_90a):
#   tools/device/cuda_attention_kernels.sh               build, tests, sanitizers, bench, summary
#   tools/device/cuda_attention_kernels.sh --build-only  compile only (works without a GPU)
#   tools/device/cuda_attention_kernels.sh --emulate     CPU emulation of the kernels (no GPU)
# Logs go to $OUT (or /tmp/cuda_attn_out); a short summary table is printed last. ~1-3 minutes.
set -uo pipefail
MODE=${1:-all}
OUTDIR=${OUT:-/tmp/cuda_attn_out}
BUILD=${BUILD_DIR:-/tmp/cuda_attn_build}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$OUTDIR" "$BUILD"
T0=$(date +%s)
SRC="src/backend/cuda"
ARCH=${ARCH:--gencode=arch=compute_90a,code=sm_90a}
FLAGS="-std=c++17 -O3 $ARCH -Isrc -Xcompiler -Wall,-Wextra -Xptxas -v"

if [ "$MODE" = "--emulate" ]; then
  g++ -std=c++20 -O2 -Isrc -I/usr/local/cuda/include -Wall -Wextra -Wno-unknown-pragmas \
    -Wno-psabi -Wno-unused-function tests/cuda/attn_emulation_test.cpp \
    -o "$BUILD/attn_emulation_test" ||
    exit 1
  "$BUILD/attn_emulation_test" "${@:2}" 2>&1 | tee "$OUTDIR/emulation.log"
  exit "${PIPESTATUS[0]}"
fi

# PREBUILT=path/to/attention_kernels_test skips the build (a binary compiled on another machine).
if [ -n "${PREBUILT:-}" ]; then
  BUILD=$(cd "$(dirname "$PREBUILT")" && pwd)
else
# ---- build (the four translation units in parallel; ptxas -v reports go to ptxas.log)
build_one() {  # $1 = source, $2 = object
  "$NVCC" $FLAGS -c "$1" -o "$2" > "$2.log" 2>&1 || { echo "BUILD FAILED: $1"; cat "$2.log"; return 1; }
}
pids=()
for f in attention_decode attention_prefill rope_kv; do
  build_one "$SRC/$f.cu" "$BUILD/$f.o" & pids+=($!)
done
build_one tests/cuda/attention_kernels_test.cu "$BUILD/test.o" & pids+=($!)
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
cat "$BUILD"/*.o.log > "$OUTDIR/ptxas.log" 2>/dev/null
if [ $fail -ne 0 ]; then echo "SUMMARY: build failed (see above)"; exit 1; fi
"$NVCC" $ARCH "$BUILD/test.o" "$BUILD/attention_decode.o" "$BUILD/attention_prefill.o" \
  "$BUILD/rope_kv.o" -o "$BUILD/attention_kernels_test" || { echo "SUMMARY: link failed"; exit 1; }
warnings=$(grep -ci "warning" "$OUTDIR/ptxas.log")
spills=$(grep -E "spill (stores|loads)" "$OUTDIR/ptxas.log" | grep -vc " 0 bytes spill stores, 0 bytes spill loads")
regs=$(grep -A2 "attn_tile_kernel" "$OUTDIR/ptxas.log" | grep -oE "Used [0-9]+ registers" | sort -u | tr '\n' ' ')
echo "build: ok in $(( $(date +%s) - T0 )) s; warnings: $warnings; functions with spills: $spills; tile kernels: $regs"
fi
if [ "$MODE" = "--build-only" ]; then exit 0; fi

BIN="$BUILD/attention_kernels_test"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1 | head -2

# ---- correctness
"$BIN" > "$OUTDIR/test.log" 2>&1
test_rc=$?
grep -E "^\[FAIL\]|^      seq|SUMMARY" "$OUTDIR/test.log" | head -60

# ---- sanitizers on the reduced set (small cases)
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
san() {  # $1 = tool
  local log="$OUTDIR/sanitizer_$1.log"
  timeout 240 "$SANITIZER" --tool "$1" --error-exitcode 7 \
    ${SAN_EXTRA:-} "$BIN" --quick > "$log" 2>&1
  local rc=$?
  local errs
  errs=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  echo "sanitizer $1: rc=$rc ${errs:-(no summary line)}"
  grep -m5 -E "Invalid|Race|Hazard|error" "$log" | grep -v "ERROR SUMMARY: 0" | head -5
  return $rc
}
san memcheck; mem_rc=$?
san racecheck; race_rc=$?
san synccheck; sync_rc=$?
san initcheck; init_rc=$?

# ---- bench
"$BIN" --bench > "$OUTDIR/bench.log" 2>&1
bench_rc=$?

# ---- summary (last)
{
  echo
  echo "==== cuda attention kernels: summary ($(( $(date +%s) - T0 )) s) ===="
  grep -E "^device:" "$OUTDIR/test.log"
  echo "tests:     rc=$test_rc  $(grep -E '^SUMMARY' "$OUTDIR/test.log")"
  echo "memcheck: rc=$mem_rc  racecheck: rc=$race_rc  synccheck: rc=$sync_rc  initcheck: rc=$init_rc  bench: rc=$bench_rc"
  if grep -q "BENCH SUMMARY" "$OUTDIR/bench.log"; then
    sed -n '/BENCH SUMMARY/,$p' "$OUTDIR/bench.log"
  else
    echo "bench did not finish; its last lines:"; tail -8 "$OUTDIR/bench.log"
  fi
} | tee "$OUTDIR/summary.txt"
[ $test_rc -eq 0 ] && [ $mem_rc -eq 0 ] && [ $race_rc -eq 0 ] && [ $sync_rc -eq 0 ] && [ $init_rc -eq 0 ] && [ $bench_rc -eq 0 ]
