#!/usr/bin/env bash
# The OpenCL backend on the NVIDIA GPU machine in one call (< 4 minutes): builds with
# -DPERFX_OPENCL=ON, then on NVIDIA's OpenCL platform runs
#   1. perfx_opencl_check: the ops against the CPU backend, then the int4 g128 GEMV at
#      4096 -> 11008 and 11008 -> 4096 against the device's copy bandwidth (an OpenCL copy kernel,
#      same run, device time from events; acceptance: >= 60% of copy),
#   2. the conformance suite, the model tests (parity, greedy goldens) and tests/opencl,
#   3. a Llama-2-7B-shape AWQ model (random:llama-2-7b) with and without --max-alloc 1GiB and 128MiB:
#      the greedy tokens must be the same (the weights split over several buffers),
#   4. perfx bench on the TinyLlama-1.1B and Llama-2-7B shapes (AWQ int4),
# and prints a short table last. Logs go to $OUT (the device tool brings them back).
#
# Before the call, here:   ../shared/tools/pack-devdeps.sh .devdeps     (headers the machine lacks)
#                          mkdir -p .devshared/models && cp -r ../shared/models/stories260K-hf \
#                              ../shared/models/stories260K .devshared/models/   (golden fixtures)
# Device call:  command "bash tools/device/opencl_nvidia.sh", carry [".devdeps", ".devshared"],
#               timeout_s 600 (about 4-5 minutes: 1-1.5 of them the build on 16 cores; the GEMV
#               is tuned once, by the bandwidth step, and the 7B runs and bench reuse it).
# STEPS="check tests cap bench" (the default; add "perf" for the conformance suite's timed shapes,
# "sweep" for the GEMV bandwidth at each forced shape: SWEEP_LANES x SWEEP_U x SWEEP_SHAPES, each a
# perfx_opencl_check --bandwidth run with PERFX_OPENCL_GEMV_LANES and PERFX_OPENCL_GEMV=SHAPEuU,
# plus SWEEP_EXTRA lines "LANES U SHAPE ENV..." such as "32 2 4x2g PERFX_OPENCL_IMAGES=0" or
# "32 2 4x2g PERFX_OPENCL_BUILD_OPTIONS=-DGEMV_PROBE" (loads only; SWEEP_OPTS=-DGEMV_PROBE probes
# the whole grid); the table goes to sweep.txt);
# (the bandwidth step times the default GEMV, on int8 activations; PERFX_OPENCL_ACT_Q8=0 in the
# environment times the fp path instead)
# "q8a" for the int8-activation GEMV (PERFX_OPENCL_ACT_Q8=1) with each dot product in Q8A_MODES
# (default "ptx khr generic": the linear conformance and test_opencl's formula check, then the
# bandwidth check; a mode that does not build runs as generic, named in q8a_bandwidth_MODE.log);
# BUILD_DIR=folder uses an existing build there.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/opencl_out}
mkdir -p "$OUT"
J=$(nproc)
export PERFX_OPENCL_PLATFORM=${PERFX_OPENCL_PLATFORM:-nvidia}  # not PoCL, which is there too
export PERFX_OPENCL_CACHE_DIR=$OUT/kernel-cache PERFX_REQUIRE_OPENCL=1 PERFX_TEST_DEVICE=opencl
if [ -d ../shared/models ]; then export PERFX_SHARED_DIR=$(cd ../shared && pwd)
elif [ -d .devshared/models ]; then export PERFX_SHARED_DIR=$PWD/.devshared; fi
DD=$PWD/.devdeps
export LD_LIBRARY_PATH=$DD/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
declare -A R  # results for the table
STEPS=${STEPS:-"check tests cap bench"}
has() { [[ " $STEPS " == *" $1 "* ]]; }

{ date -u; nvidia-smi -L; command -v clinfo >/dev/null && clinfo -l; g++ --version | head -1; cmake --version | head -1; } > "$OUT/env.log" 2>&1

# ---- build
t0=$(date +%s)
B=${BUILD_DIR:-build-dev}
case "$B" in /*) export PERFX_TEST_BIN=${PERFX_TEST_BIN:-$B/perfx} ;; *) export PERFX_TEST_BIN=${PERFX_TEST_BIN:-$PWD/$B/perfx} ;; esac
extra=()
[ -d "$DD" ] && extra=(-DCMAKE_PREFIX_PATH="$DD" -DPCRE2_INCLUDE_DIR="$DD/include")
if [ -z "${BUILD_DIR:-}" ]; then
  { cmake -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFX_OPENCL=ON -DPERFX_BUILD_BENCH=OFF \
      -DPERFX_SERVER=OFF "${extra[@]}" &&
    cmake --build "$B" -j"$J" --target perfx perfx_opencl_check test_conformance test_model test_opencl; } > "$OUT/build.log" 2>&1
  R[build]="rc=$? $(( $(date +%s) - t0 )) s"
else
  R[build]="prebuilt in $B"
fi

# ---- 1. self-check and bandwidth
if has check; then
timeout 120 $B/perfx_opencl_check 0 > "$OUT/check.log" 2>&1; R[check]="rc=$? $(tail -n 1 "$OUT/check.log")"
PERFX_OPENCL_VERBOSE=1 timeout 120 $B/perfx_opencl_check --bandwidth 0 > "$OUT/bandwidth.log" 2>&1
R[bandwidth]="rc=$?"
fi

# ---- 1b. GEMV shape sweep (sweep.txt: lanes, U, shape, then per GEMV µs, GB/s, % of copy)
sweep_one() {  # lanes u shape [VAR=value ...]
  local lanes=$1 u=$2 shape=$3; shift 3
  local log="$OUT/sweep/$(( ++SWEEP_N ))_l${lanes}_u${u}_${shape}.log" opts="${SWEEP_OPTS:-}"
  local e
  for e in "$@"; do case "$e" in PERFX_OPENCL_BUILD_OPTIONS=*) opts="$opts ${e#*=}" ;; esac; done
  env PERFX_OPENCL_GEMV_LANES="$lanes" PERFX_OPENCL_GEMV="${shape}u$u" PERFX_OPENCL_TUNE=0 "$@" \
    PERFX_OPENCL_BUILD_OPTIONS="$opts" timeout 60 $B/perfx_opencl_check --bandwidth 0 > "$log" 2>&1
  printf '%-3s %s %-5s %-40s %s\n' "$lanes" "$u" "$shape" "$*" \
    "$(grep '^gemv' "$log" | awk '{printf "%s us %s GB/s %s | ", $7, $9, $14}') back to back: $(grep '^  back to back' "$log" | awk '{printf "%s ", $17}')" >> "$OUT/sweep.txt"
}
SWEEP_N=0
if has sweep; then
  mkdir -p "$OUT/sweep"
  for lanes in ${SWEEP_LANES:-8 16 32}; do
    for u in ${SWEEP_U:-1 2 4}; do
      for shape in ${SWEEP_SHAPES:-2x4g 4x2g 8x2g 4x4g 2x4}; do sweep_one "$lanes" "$u" "$shape"; done
    done
  done
  while read -r line; do [ -n "$line" ] && sweep_one $line; done <<< "${SWEEP_EXTRA:-}"
  R[sweep]="$(wc -l < "$OUT/sweep.txt") configurations (sweep.txt)"
fi

# ---- 2. tests (fp32 activations: NVIDIA's OpenCL has no cl_khr_fp16; fp16 storage also works there)
gt() {  # name, log, command...: "N passed, M failed, K skipped"
  local name=$1 log=$2; shift 2
  PERFX_OPENCL_TUNE=0 timeout 240 "$@" > "$log" 2>&1; local rc=$?  # tests: the default GEMV shape
  R[$name]="rc=$rc $(grep -E '^\[  PASSED  \]' "$log" | head -1 | sed 's/\[  PASSED  \] //') $(grep -cE '^\[  FAILED  \] .*opencl' "$log") failed $(grep -E '^\[  SKIPPED \]' "$log" | head -1 | sed 's/\[  SKIPPED \] //') skipped"
}
if has tests; then
gt conformance "$OUT/conformance_f32.log" $B/tests/test_conformance --gtest_filter='*opencl*'
PERFX_OPENCL_DTYPE=f16 gt conformance_f16 "$OUT/conformance_f16.log" $B/tests/test_conformance --gtest_filter='*opencl*'
gt model "$OUT/model.log" $B/tests/test_model --gtest_filter='*opencl*'
gt opencl_tests "$OUT/test_opencl.log" $B/tests/test_opencl
fi
has perf && gt perf "$OUT/conformance_perf.log" $B/tests/test_conformance --gtest_filter='*opencl*Perf*' --perf

# ---- 2b. int8 activations for the int4 GEMV (PERFX_OPENCL_ACT_Q8=1) with each dot product:
# the linear conformance cases and test_opencl's formula check, then the bandwidth check per mode
if has q8a; then
  for mode in ${Q8A_MODES:-ptx khr generic}; do
    PERFX_OPENCL_ACT_Q8=1 PERFX_OPENCL_DP4A=$mode gt "q8a_conf_$mode" "$OUT/q8a_conformance_$mode.log" \
      $B/tests/test_conformance --gtest_filter='*Linear*opencl*'
    PERFX_OPENCL_DP4A=$mode gt "q8a_formula_$mode" "$OUT/q8a_formula_$mode.log" \
      $B/tests/test_opencl --gtest_filter='OpenClGemv.Int8*'
    PERFX_OPENCL_ACT_Q8=1 PERFX_OPENCL_DP4A=$mode PERFX_OPENCL_VERBOSE=1 timeout 120 \
      $B/perfx_opencl_check --bandwidth 0 > "$OUT/q8a_bandwidth_$mode.log" 2>&1
    R[q8a_bw_$mode]="rc=$? $(grep -E '^gemv' "$OUT/q8a_bandwidth_$mode.log" | awk '{printf "%s us %s GB/s %s | ", $7, $9, $14}')"
  done
fi

# ---- 3. 7B-shape AWQ with and without a 1 GiB / 128 MiB cap on one buffer: same tokens
if has cap; then
run7b() { PERFX_OPENCL_VERBOSE=1 timeout 150 $B/perfx run -m random:llama-2-7b --device opencl -p "Once upon a time" -n 16 --temp 0 "$@"; }
run7b > "$OUT/7b_nocap.txt" 2> "$OUT/7b_nocap.log"; rc1=$?
run7b --max-alloc 1GiB > "$OUT/7b_cap1g.txt" 2> "$OUT/7b_cap1g.log"; rc2=$?
run7b --max-alloc 128MiB > "$OUT/7b_cap128m.txt" 2> "$OUT/7b_cap128m.log"; rc3=$?
same() { [ -s "$OUT/7b_nocap.txt" ] && cmp -s "$OUT/7b_nocap.txt" "$1" && echo same || echo DIFFERENT; }
R[cap]="rc=$rc1/$rc2/$rc3 1GiB: $(same "$OUT/7b_cap1g.txt"), 128MiB: $(same "$OUT/7b_cap128m.txt") ($(grep -c 'split over' "$OUT/7b_cap128m.log") weights split at 128MiB)"
fi

# ---- 4. bench
has bench &&
for shape in tinyllama-1.1b llama-2-7b; do
  timeout 150 $B/perfx bench -m random:$shape --device opencl -p 512 -n 128 -r 2 > "$OUT/bench_$shape.md" 2> "$OUT/bench_$shape.log"
  R[bench_$shape]="rc=$? $(grep -E 'pp512|tg128' "$OUT/bench_$shape.md" | awk -F'|' '{gsub(/ /,"",$0); print $(NF-1)}' | paste -sd' ')"
done

echo
echo "===== OpenCL on $(grep -m1 -o 'NVIDIA[^)]*' "$OUT/bandwidth.log" || echo NVIDIA) ====="
grep -E '^gemv' "$OUT/bandwidth.log"
[ -s "$OUT/sweep.txt" ] && { echo "sweep (lanes U shape env: 4096->11008 | 11008->4096):"; cat "$OUT/sweep.txt"; }
for k in build check sweep conformance conformance_f16 model opencl_tests q8a_conf_ptx q8a_formula_ptx q8a_bw_ptx q8a_conf_khr q8a_formula_khr q8a_bw_khr q8a_conf_generic q8a_formula_generic q8a_bw_generic cap bench_tinyllama-1.1b bench_llama-2-7b; do
  printf '%-22s %s\n' "$k" "${R[$k]}"
done
echo "(bench columns: pp512 tok/s, tg128 tok/s; logs in \$OUT)"
