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
. tools/device/ocl_session.sh
BUDGET=${BUDGET:-540}
echo "== env: $(nvidia-smi -L | head -1)"
ocl_bw old "$B/old/perfx_opencl_check"
ocl_bw new "$B/perfx_opencl_check"
[ -n "${QUICK:-}" ] || ocl_bw new_probe "$B/perfx_opencl_check" PERFX_OPENCL_BUILD_OPTIONS=-DGEMV_PROBE \
  PERFX_OPENCL_GEMV=${PROBE_SHAPE:-4x2gb4} PERFX_OPENCL_TUNE=0

echo "== sweep (new, forced shapes, no tuning): shape: GEMV us / GB/s / % of copy for both, isolated; b2b: back to back"
[ -n "${QUICK:-}" ] || for shape in ${SWEEP_SHAPES:-4x2g 4x2gb2 4x2gb4 4x2gb8 2x4gb4 8x2gb2 8x2gb4 2x2gb8 4x1gb8 4x2gu4b4}; do
  over_budget && break
  ocl_sweep_line "$shape" PERFX_OPENCL_GEMV=$shape
done

[ -n "${NO_TESTS:-}" ] || ocl_tests opencl conformance model

echo "== perfx bench --device opencl tg128 (old vs new, interleaved)"
for r in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    for arm in old new; do
      bin=$B/perfx; [ $arm = old ] && bin=$B/old/perfx
      ocl_bench $m $arm $r "$bin" $arm
    done
  done
done
echo "== done in $(( $(date +%s) - T0 )) s"
