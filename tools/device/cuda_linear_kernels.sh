#!/usr/bin/env bash
# CUDA linear kernels (src/backend/cuda/linear_*.cu): build the test for sm_90a, run the host
# checks and every GPU correctness family (one process each, so a fault in one family does not
# hide the others), compute-sanitizer memcheck on the reduced case set, then the benchmark.
# Run from the repository root on the GPU machine. Full logs go to $OUT (default
# /tmp/cuda_linear_out); a short summary is printed last. Budget: < 3 minutes.
#   tools/device/cuda_linear_kernels.sh               # build + tests + memcheck + bench
#   tools/device/cuda_linear_kernels.sh --build-only  # compile and link only (works without a GPU)
#   NCU=1 tools/device/cuda_linear_kernels.sh         # + Nsight Compute on 7B gate_up M=1 (NCU_KERNEL:
#                                                      # one or more kernels, space-separated)
#   NCU_ONLY=1 ...                                     # build + Nsight Compute only
#   SKIP_BENCH=1 ...                                   # build + tests + memcheck, no bench
#   ARCH="-gencode=..." NVCC=... BUILD_DIR=... override the defaults.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuda_linear_out}
BUILD=${BUILD_DIR:-/tmp/cuda_linear_build}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
ARCH=${ARCH:--gencode=arch=compute_90a,code=sm_90a}
mkdir -p "$OUT" "$BUILD"
T0=$(date +%s)
CUFLAGS="-std=c++17 -O3 $ARCH -Isrc -Iinclude -Xcompiler -Wall,-Wextra -Xptxas -v"

# PREBUILT=path/to/linear_kernels_test skips the build (a binary compiled on another machine).
if [ -n "${PREBUILT:-}" ]; then
  BUILD=$(cd "$(dirname "$PREBUILT")" && pwd)
else
# ---- build: every translation unit in parallel, then link
pids=()
for f in src/backend/cuda/linear_pack.cu src/backend/cuda/linear_act_q8.cu src/backend/cuda/linear_gemv.cu src/backend/cuda/linear_gemv2.cu src/backend/cuda/linear_gemv3.cu \
         src/backend/cuda/linear_gemm.cu src/backend/cuda/linear_dense.cu \
         src/backend/cuda/linear_dispatch.cu tests/cuda/linear_kernels_test.cu; do
  b=$(basename "$f" .cu)
  $NVCC $CUFLAGS -c "$f" -o "$BUILD/$b.o" > "$BUILD/$b.log" 2>&1 &
  pids+=($!)
done
for f in src/core/quantized.cpp src/core/dtype.cpp src/core/tensor.cpp; do
  b=$(basename "$f" .cpp)
  $NVCC -std=c++17 -O2 -Isrc -Iinclude -Xcompiler -Wall,-Wextra -c "$f" -o "$BUILD/core_$b.o" \
    > "$BUILD/core_$b.log" 2>&1 &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
cat "$BUILD"/*.log > "$OUT/build.log"
if [ $fail -ne 0 ]; then
  echo "BUILD FAILED"; grep -E "error|warning" "$OUT/build.log" | head -40; exit 1
fi
$NVCC $ARCH "$BUILD"/*.o -lcublas -o "$BUILD/linear_kernels_test" >> "$OUT/build.log" 2>&1 \
  || { echo "LINK FAILED"; tail -20 "$OUT/build.log"; exit 1; }
warn=$(grep -c -i "warning" "$OUT/build.log")
spills=$(grep -E "spill (stores|loads)" "$OUT/build.log" | grep -v " 0 bytes spill stores, 0 bytes spill loads" | wc -l)
stack=$(grep -E "bytes stack frame" "$OUT/build.log" | grep -v "^ *0 bytes stack frame" | wc -l)
echo "build: ok in $(( $(date +%s) - T0 )) s; warnings $warn; kernels with spills $spills, with a stack frame $stack (ptxas -v in $OUT/build.log)"
fi
[ "${1:-}" = "--build-only" ] && exit 0

# ---- optional: Nsight Compute on the 7B gate_up M = 1 GEMV (NCU=1; NCU_KERNEL=gemv2 (default
# config, default) | gemv (the old kernel) | a v2 label such as 4w/r1). Text: $OUT/ncu_*.txt,
# report: $OUT/ncu_*.ncu-rep.
run_ncu() {
  local NCU_BIN NK tag
  NCU_BIN=${NCU_BIN:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
  if [ ! -x "$NCU_BIN" ]; then echo "ncu: not found ($NCU_BIN)"; return; fi
  for NK in ${NCU_KERNEL:-gemv2}; do
    tag=$(echo "$NK" | tr '/:' '__')
    timeout 90 "$NCU_BIN" --clock-control none --set full --kernel-name regex:w4_gemv \
      --launch-skip 20 --launch-count 2 -f -o "$OUT/ncu_gate_up_m1_$tag" \
      "$T" --bench-one 7B_gate_up 1 "$NK" 40 > "$OUT/ncu_run_$tag.log" 2>&1
    echo "ncu ($NK): rc=$? $(grep -m1 'bench-one' "$OUT/ncu_run_$tag.log")"
    "$NCU_BIN" --import "$OUT/ncu_gate_up_m1_$tag.ncu-rep" --print-summary none --page details \
      > "$OUT/ncu_gate_up_m1_$tag.txt" 2>&1
    grep -E "^  [a-z_0-9]+.*w4_gemv|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible" \
      "$OUT/ncu_gate_up_m1_$tag.txt" | head -24
  done
}
T="$BUILD/linear_kernels_test"
# NCU_ONLY=1: build, then only the Nsight Compute step (no tests, no bench).
if [ "${NCU_ONLY:-0}" = "1" ]; then run_ncu; exit 0; fi

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader > "$OUT/gpu.txt" 2>&1
echo "gpu: $(cat "$OUT/gpu.txt")"

# ---- correctness
status=0
timeout 60 "$T" --host-only > "$OUT/test_host.log" 2>&1 || status=1
echo "host checks: $(tail -1 "$OUT/test_host.log")"
for fam in gemv gemm dense w8 auto graph; do
  timeout 60 "$T" --only "$fam" > "$OUT/test_$fam.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  printf "%-6s rc=%-3s pass %4s fail %3s %s\n" "$fam" "$rc" "$(grep -c '^PASS' "$OUT/test_$fam.log")" \
    "$(grep -c '^FAIL' "$OUT/test_$fam.log")" "$(grep -m1 '^FATAL' "$OUT/test_$fam.log" | cut -c1-150)"
done
# The dispatcher and graph capture with w4_gemv2 / w4_gemv3 forced on every shape they take
# (PERFX_CUDA_W4_GEMV=v2|v3; PDL launch is the default on sm_90, pdl.cuh).
for g in v2 v3; do
  for fam in auto graph; do
    PERFX_CUDA_W4_GEMV=$g timeout 60 "$T" --only "$fam" > "$OUT/test_${fam}_$g.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=1
    printf "%-6s rc=%-3s pass %4s fail %3s %s\n" "${fam}-$g" "$rc" "$(grep -c '^PASS' "$OUT/test_${fam}_$g.log")" \
      "$(grep -c '^FAIL' "$OUT/test_${fam}_$g.log")" "$(grep -m1 '^FATAL' "$OUT/test_${fam}_$g.log" | cut -c1-150)"
  done
done
grep -h -E "^(w4_|w8_)" "$OUT/test_gemv.log" | head -40 > "$OUT/kernels.txt"
echo "kernels (regs / ctas per SM): $(awk '{printf "%s %s/%s  ", $1, $3, $NF}' "$OUT/kernels.txt")" | fold -w 200
nfail=$(cat "$OUT"/test_*.log | grep -c '^FAIL')
if [ "$nfail" -gt 0 ]; then
  echo "---- first failures (of $nfail; full lines in $OUT/test_*.log)"
  cat "$OUT"/test_*.log | grep '^FAIL' | head -12 | cut -c1-240
fi
# w4_gemv2 by conversion: magic (fp16, offset 1024: expected <= ~1e-4), sub (fp16 subnormal:
# ~1e-6 if the tensor cores take fp16 subnormals, else FAIL), bf16 (offset 128).
for conv in magic sub bf16; do
  awk -v c="$conv" '$2 ~ /^w4_gemv2/ && $2 ~ ("/" c) { for (i = 1; i <= NF; ++i) if ($i == "rel") { v = $(i+1) + 0; if (v > m) m = v }; n[$1]++ }
    END { printf "w4_gemv2/%-5s pass %d fail %d max rel err %.2e\n", c, n["PASS"], n["FAIL"], m }' "$OUT/test_gemv.log"
done
# Largest errors seen per family (to compare with the expected ~1e-6 gemv, ~3e-4 / 2e-3 gemm).
for fam in gemv gemm w8 auto; do
  awk -v f="$fam" '/^PASS/ { for (i = 1; i <= NF; ++i) if ($i == "rel") { v = $(i+1) + 0; x = ($2 ~ /bf16/ || $0 ~ /x=bf16/) ? "bf16" : "f16"; if (v > m[x]) m[x] = v } }
    END { printf "%s max rel err: f16 %.2e  bf16 %.2e\n", f, m["f16"], m["bf16"] }' "$OUT/test_$fam.log"
done

# ---- memcheck on the reduced set
if command -v compute-sanitizer > /dev/null 2>&1; then
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 "$T" --quick \
    > "$OUT/memcheck.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  echo "memcheck (--quick): rc=$rc ($(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")); $(grep -c '^PASS' "$OUT/memcheck.log") pass, $(grep -c '^FAIL' "$OUT/memcheck.log") fail"
  grep -m5 -E "Invalid|out of bounds|Address" "$OUT/memcheck.log" | cut -c1-200
else
  echo "memcheck: compute-sanitizer not found"
fi

# ---- benchmark (SKIP_BENCH=1: tests only)
if [ "${SKIP_BENCH:-0}" != "1" ]; then
timeout 180 "$T" --bench-only > "$OUT/bench.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  status=1
  echo "bench rc=$rc (see $OUT/bench.log)"
  grep -E "ERROR|FATAL" "$OUT/bench.log" | head -5 | cut -c1-200
fi
grep -m1 "device-to-device" "$OUT/bench.log"
fi

[ "${NCU:-0}" = "1" ] && run_ncu
echo "total $(( $(date +%s) - T0 )) s; logs in $OUT: build.log test_*.log memcheck.log bench.log"
sed -n '/^== summary/,$p' "$OUT/bench.log"
exit $status
