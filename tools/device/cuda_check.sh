#!/usr/bin/env bash
# One GPU-machine call for the CUDA backend: the kernel tests (linear, attention: correctness,
# compute-sanitizer, microbenchmarks), the backend conformance suite and the model parity / greedy
# tests on cuda:0 (fp16, then bf16), compute-sanitizer memcheck over the conformance suite, and
# perfx bench at real sizes (random weights in the exact TinyLlama-1.1B and Llama-2-7B shapes).
#
# Binaries are built on the development machine (tools/device/pack_cuda_bins.sh) and carried as
# .devpack/bin.tar.xz with the libraries the GPU machine lacks in .devpack/lib (BUILD=1 builds
# there instead, with .devdeps from shared/tools/pack-devdeps.sh); .devshared holds the shared model
# fixtures. Every log goes into $OUT/logs.tar.gz; the summary is printed last.
# Steps: STEPS="kernels conformance model memcheck bench profile pdl trigger opencl" (default all but
# pdl and trigger;
# the opencl step runs tools/device/opencl_nvidia.sh with its STEPS taken from OCL_STEPS); NCU=1 adds
# Nsight Compute on the W4 GEMV (in the kernels step); GEMV=old|v1|v2|v2s|v3 picks the W4 GEMV
# for the model-level runs (PERFX_CUDA_W4_GEMV; default: w4_gemv3 on the large matrices).
#   run: command "bash tools/device/cuda_check.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/perfx_out}
L=/tmp/perfx_logs
rm -rf "$L" && mkdir -p "$L" "$OUT"
export LD_LIBRARY_PATH="$ROOT/.devpack/lib:$ROOT/.devdeps/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
export PERFX_SHARED_DIR="$ROOT/.devshared"
STEPS=${STEPS:-"kernels conformance model memcheck bench profile opencl"}
B=$ROOT/.devbin
if [ -f "$ROOT/.devpack/bin.tar.xz" ]; then
  mkdir -p /tmp/devbin && tar -xJf "$ROOT/.devpack/bin.tar.xz" -C /tmp/devbin && B=/tmp/devbin/.devbin
fi
T0=$(date +%s)
SUM=$L/summary.txt
: > "$SUM"
note() { echo "$*" | tee -a "$SUM"; }
finish() {
  tar -czf "$OUT/logs.tar.gz" -C /tmp perfx_logs 2> /dev/null
  echo "==================== SUMMARY ($(( $(date +%s) - T0 )) s)"
  cat "$SUM"
}
trap finish EXIT
# A step runs when listed and while the call's budget lasts (BUDGET seconds, default 540).
has() { [[ " $STEPS " == *" $1 "* ]] && [ $(( $(date +%s) - T0 )) -lt "${BUDGET:-540}" ]; }
# Stage part 1 of the llama.cpp peer for a later call (tools/device/llamacpp_peer.sh).
[ -f "$ROOT/.devllama1/llama.tar.xz.part1" ] && cp "$ROOT/.devllama1/llama.tar.xz.part1" /tmp/
[ -n "${GEMV:-}" ] && export PERFX_CUDA_W4_GEMV=$GEMV

if [ "${BUILD:-0}" = 1 ]; then
  cmake -S . -B /tmp/bcuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFX_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DPERFX_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$ROOT/.devdeps" -DPCRE2_INCLUDE_DIR="$ROOT/.devdeps/include" \
    -DHTTPLIB_INCLUDE="$ROOT/.devdeps/include" \
    -DHTTPLIB_LIB="$ROOT/.devdeps/lib/x86_64-linux-gnu/libcpp-httplib.so" > "$L/cmake.log" 2>&1 &&
    cmake --build /tmp/bcuda -j16 --target perfx test_conformance test_model > "$L/build.log" 2>&1 ||
    { note "build FAILED: $(grep -m3 error "$L/build.log")"; exit 1; }
  mkdir -p "$B/tests" && cp /tmp/bcuda/perfx "$B/" && cp /tmp/bcuda/tests/test_conformance /tmp/bcuda/tests/test_model "$B/tests/"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader \
  > "$L/gpu.txt" 2>&1
note "gpu: $(head -1 "$L/gpu.txt")"
"$B/perfx" --version > /dev/null 2>&1 || note "perfx does not start here: $("$B/perfx" --version 2>&1 | head -2)"

if has kernels; then
  t=$(date +%s)
  NCU=${NCU:-1} PREBUILT="$B/lin/linear_kernels_test" OUT="$L/linear" timeout 240 bash tools/device/cuda_linear_kernels.sh \
    > "$L/linear.out" 2>&1
  note "linear kernels rc=$? ($(( $(date +%s) - t )) s):"
  grep -E "^(gemv|gemm|dense|w8|auto|graph) +rc=|max rel err|memcheck|device-to-device" "$L/linear.out" | sed 's/^/  /' |
    tee -a "$SUM"
  grep -A12 "^---- first failures" "$L/linear.out" | cut -c1-200 | sed 's/^/  /' | tee -a "$SUM"
  t=$(date +%s)
  PREBUILT="$B/attn/attention_kernels_test" OUT="$L/attn" timeout 170 bash tools/device/cuda_attention_kernels.sh \
    > "$L/attn.out" 2>&1
  note "attention kernels rc=$? ($(( $(date +%s) - t )) s):"
  grep -E "SUMMARY|^\[FAIL\]|sanitizer|ERROR SUMMARY" "$L/attn.out" | head -20 | cut -c1-200 | sed 's/^/  /' |
    tee -a "$SUM"
fi

gtest_line() { grep -E "^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]" "$1" | tr '\n' ' '; }
if has conformance; then
  for dt in f16 bf16; do
    PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" --gtest_filter='*cuda*' \
      > "$L/conformance_$dt.log" 2>&1
    note "conformance cuda $dt rc=$?: $(gtest_line "$L/conformance_$dt.log")"
    grep -E "rel err|Failure|error:" "$L/conformance_$dt.log" | head -12 | cut -c1-220 | sed 's/^/  /' | tee -a "$SUM"
  done
  # w4_gemv3 forced on every W4 matrix it takes (the fixtures are below its size threshold): its
  # SwiGLU epilogue (linear_silu_mul) and PDL.
  for dt in f16 bf16; do
    PERFX_CUDA_W4_GEMV=v3 PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" \
      --gtest_filter='*cuda*' > "$L/conformance_v3_$dt.log" 2>&1
    note "conformance cuda $dt, w4_gemv3 forced, rc=$?: $(gtest_line "$L/conformance_v3_$dt.log")"
    grep -E "rel err|Failure|error:" "$L/conformance_v3_$dt.log" | head -8 | cut -c1-220 | sed 's/^/  /' | tee -a "$SUM"
  done
  # Without the dequantized weight copies (PERFX_CUDA_DENSE_WEIGHTS=0): the per-call dequantize +
  # cuBLAS rung for T >= 65 (the default run takes the copies: the fixtures are small).
  PERFX_CUDA_DENSE_WEIGHTS=0 PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" \
    --gtest_filter='*cuda*' > "$L/conformance_nodense.log" 2>&1
  note "conformance cuda f16, no dense weight copies, rc=$?: $(gtest_line "$L/conformance_nodense.log")"
  grep -E "rel err|Failure|error:" "$L/conformance_nodense.log" | head -8 | cut -c1-220 | sed 's/^/  /' | tee -a "$SUM"
  PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" --perf --gtest_filter='*cuda*' > "$L/conformance_perf.log" 2>&1
  note "conformance --perf rc=$? (per-op times in conformance_perf.log)"
fi

if has model; then
  for dt in f16 bf16; do
    PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 180 "$B/tests/test_model" \
      --gtest_filter='*cuda*' > "$L/model_$dt.log" 2>&1
    note "model parity + greedy cuda $dt rc=$?: $(gtest_line "$L/model_$dt.log")"
    grep -E "dlogit|Failure|error:" "$L/model_$dt.log" | head -14 | cut -c1-200 | sed 's/^/  /' | tee -a "$SUM"
  done
  PERFX_CUDA_W4_GEMV=v3 PERFX_TEST_DEVICE=cuda:0 timeout 180 "$B/tests/test_model" \
    --gtest_filter='*cuda*' > "$L/model_v3.log" 2>&1
  note "model parity + greedy cuda f16, w4_gemv3 forced, rc=$?: $(gtest_line "$L/model_v3.log")"
  grep -E "dlogit|Failure|error:" "$L/model_v3.log" | head -10 | cut -c1-200 | sed 's/^/  /' | tee -a "$SUM"
fi

if has memcheck; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # w4_gemv3 forced: its SwiGLU epilogue and, for T > 8, the GEMM + interleaved SwiGLU kernel.
  PERFX_CUDA_W4_GEMV=v3 PERFX_TEST_DEVICE=cuda:0 PERFX_CUDA_GRAPHS=0 timeout 240 "$SAN" --tool memcheck --error-exitcode 3 \
    "$B/tests/test_conformance" --gtest_filter='*cuda*' > "$L/memcheck.log" 2>&1
  note "memcheck (conformance on cuda) rc=$?: $(grep -m1 'ERROR SUMMARY' "$L/memcheck.log")"
  grep -m6 -E "Invalid|out of bounds|Address|Program hit" "$L/memcheck.log" | cut -c1-200 | sed 's/^/  /' | tee -a "$SUM"
fi

if has profile; then
  # Per-op GPU time of a decode step and of a 512-token prefill (eager, events around every op).
  for m in random:llama-2-7b random:tinyllama-1.1b; do
    n=$(echo "$m" | tr ':.' '__')
    PERFX_CUDA_PROFILE=1 timeout 120 "$B/perfx" bench --device cuda -m "$m" -p 0 -n 64 -r 1 > /dev/null \
      2> "$L/profile_tg_$n.txt"
    note "profile tg $m rc=$? (top ops):"
    grep -A9 "perfx cuda profile" "$L/profile_tg_$n.txt" | tail -8 | cut -c1-110 | sed 's/^/  /' | tee -a "$SUM"
    PERFX_CUDA_PROFILE=1 timeout 120 "$B/perfx" bench --device cuda -m "$m" -p 512 -n 0 -r 1 > /dev/null \
      2> "$L/profile_pp_$n.txt"
  done
  note "profile pp512 7B (top ops):"
  grep -A7 "perfx cuda profile" "$L/profile_pp_random_llama-2-7b.txt" | tail -6 | cut -c1-110 | sed 's/^/  /' |
    tee -a "$SUM"
fi

if has bench; then
  bench() {  # name, args...
    local name=$1
    shift
    timeout 150 "$B/perfx" bench --device cuda "$@" > "$L/bench_$name.md" 2> "$L/bench_$name.err"
    local rc=$?
    note "bench $name rc=$rc: $(grep -E '\| (pp|tg)' "$L/bench_$name.md" | awk -F'|' '{printf "%s %s;", $7, $8}')"
    [ $rc -ne 0 ] && tail -3 "$L/bench_$name.err" | sed 's/^/  /' | tee -a "$SUM"
    grep -m1 "peak resident" "$L/bench_$name.err" | sed 's/^/  /' | tee -a "$SUM"
  }
  PERFX_CUDA_LINEAR_LOG=1 bench 7b_awq -m random:llama-2-7b -p 512 -n 128 -r 3
  bench tiny_awq -m random:tinyllama-1.1b -p 512 -n 128 -r 3
  bench 7b_q4_0 -m random:llama-2-7b:q4_0 -p 512 -n 128 -r 2
  # Dense fp16 weights (no W4 kernel): BENCH_F16=1 adds it.
  [ "${BENCH_F16:-0}" = 1 ] && bench 7b_f16 -m random:llama-2-7b:f16 -p 512 -n 128 -r 2
  bench 7b_awq_batch -m random:llama-2-7b -p 0 -n 64 -B 8,64 -r 2
  # The same runs without programmatic dependent launch (every kernel waits for its predecessor
  # to finish before it starts), for the A/B; AB_OLD_GEMV=1 adds the GEMV ladder before w4_gemv3.
  PERFX_CUDA_PDL=0 bench 7b_awq_pdl_off -m random:llama-2-7b -p 0 -n 128 -r 3
  PERFX_CUDA_PDL=0 bench tiny_awq_pdl_off -m random:tinyllama-1.1b -p 0 -n 128 -r 3
  # Without the SwiGLU epilogue (gate|up GEMV + a SwiGLU kernel, as before it).
  PERFX_CUDA_SWIGLU_EPILOGUE=0 bench 7b_awq_swiglu_off -m random:llama-2-7b -p 0 -n 128 -r 3
  PERFX_CUDA_SWIGLU_EPILOGUE=0 bench tiny_awq_swiglu_off -m random:tinyllama-1.1b -p 0 -n 128 -r 3
  if [ "${AB_OLD_GEMV:-0}" = 1 ]; then
    PERFX_CUDA_W4_GEMV=old bench 7b_awq_gemv_old -m random:llama-2-7b -p 0 -n 128 -r 3
    PERFX_CUDA_W4_GEMV=old bench tiny_awq_gemv_old -m random:tinyllama-1.1b -p 0 -n 128 -r 3
  fi
fi

if has trigger; then
  # Where w4_gemv3 lets the next kernel launch (PERFX_CUDA_PDL_GEMV3: late = after the main loop,
  # NN = after NN % of each warp's batches), decode tok/s for each of TRIGGERS.
  for p in ${TRIGGERS:-late 50 75 90}; do
    for m in "7b -m random:llama-2-7b" "tiny -m random:tinyllama-1.1b"; do
      n=${m%% *}
      PERFX_CUDA_PDL_GEMV3=$p timeout 150 "$B/perfx" bench --device cuda ${m#* } -p 0 -n 128 -r 3 \
        > "$L/trigger_${p}_$n.md" 2>&1
      note "trigger $p $n rc=$?: $(grep -E '\| tg' "$L/trigger_${p}_$n.md" | awk -F'|' '{printf "%s %s;", $7, $8}')"
    done
  done
fi

if has pdl; then
  # Programmatic dependent launch A/B (docs/cuda_linear_notes.md §10): decode with the default
  # (PDL on every kernel but the W4 GEMM; w4_gemv3 lets its successor launch after its main loop,
  # the rest at entry), with w4_gemv / w8_gemv triggering late too, with the GEMM on PDL too
  # (trigger after its main loop), and with PDL off everywhere; PDL_ALL=1 adds w4_gemv3
  # triggering at entry and without PDL.
  pdl_bench() {  # label, env...
    local label=$1
    shift
    for m in "7b -m random:llama-2-7b -p 0 -n 128 -r 3" "tiny -m random:tinyllama-1.1b -p 0 -n 128 -r 3" \
      "7b_batch -m random:llama-2-7b -p 0 -n 64 -B 8,64 -r 2"; do
      local n=${m%% *}
      env "$@" timeout 150 "$B/perfx" bench --device cuda ${m#* } > "$L/pdl_${label}_$n.md" 2>&1
      note "pdl $label $n rc=$?: $(grep -E '\| (pp|tg)' "$L/pdl_${label}_$n.md" | awk -F'|' '{printf "%s %s;", $7, $8}')"
    done
  }
  pdl_bench on PERFX_CUDA_PDL=1
  [ "${PDL_ALL:-0}" = 1 ] && pdl_bench v3entry PERFX_CUDA_PDL_GEMV3=entry
  [ "${PDL_ALL:-0}" = 1 ] && pdl_bench v3off PERFX_CUDA_PDL_GEMV3=0
  pdl_bench v1late PERFX_CUDA_PDL_GEMV1=late
  pdl_bench gemmon PERFX_CUDA_PDL_GEMM=1
  pdl_bench off PERFX_CUDA_PDL=0
fi

if has opencl; then
  t=$(date +%s)
  STEPS="${OCL_STEPS:-check tests cap bench}" OUT="$L/opencl" BUILD_DIR="$B" PERFX_SHARED_DIR="$ROOT/.devshared" timeout "${OCL_TIMEOUT:-300}" bash tools/device/opencl_nvidia.sh \
    > "$L/opencl.out" 2>&1
  note "opencl (NVIDIA) rc=$? ($(( $(date +%s) - t )) s):"
  sed -n '/===== OpenCL/,$p' "$L/opencl.out" | cut -c1-160 | sed 's/^/  /' | tee -a "$SUM"
fi
