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
. tools/device/ocl_session.sh
BUDGET=${BUDGET:-530} BW_TIMEOUT=120 BENCH_TIMEOUT=120
echo "== env: $(nvidia-smi -L | head -1)"
ocl_bw old "$B/old/perfx_opencl_check"
ocl_bw new "$B/perfx_opencl_check"
if [ -z "${QUICK:-}" ]; then
ocl_bw new_global "$B/perfx_opencl_check" PERFX_OPENCL_ACT_LOCAL=0
ocl_bw new_probe "$B/perfx_opencl_check" PERFX_OPENCL_BUILD_OPTIONS=-DGEMV_PROBE
ocl_bw old_probe "$B/old/perfx_opencl_check" PERFX_OPENCL_BUILD_OPTIONS=-DGEMV_PROBE
fi

echo "== sweep (new, forced shapes, no tuning): shape u: GEMV us / GB/s / % of copy for both"
[ -n "${QUICK:-}" ] || for u in ${SWEEP_U:-1 2}; do  # g2: U 2 with PERFX_OPENCL_ACT_LOCAL=0
  for shape in ${SWEEP_SHAPES:-2x4g 4x2g 8x2g 4x1g 8x1g}; do
    over_budget && break
    ocl_sweep_line "$shape u$u" PERFX_OPENCL_ACT_LOCAL=$([ $u = g2 ] && echo 0 || echo 1) \
      PERFX_OPENCL_GEMV=${shape}u${u#g}
  done
done

[ -n "${NO_TESTS:-}" ] || ocl_tests opencl conformance model

echo "== perfx bench --device opencl tg128 (old vs new, interleaved)"
for r in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for arm in ${ARMS:-old new}; do
      bin=$B/perfx; [ $arm = old ] && bin=$B/old/perfx
      ocl_bench $m $arm $r "$bin" $arm PERFX_OPENCL_ACT_LOCAL=$([ $arm = apart ] && echo 0 || echo 1)
    done
  done
done
echo "== done in $(( $(date +%s) - T0 )) s"
