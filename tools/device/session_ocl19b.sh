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
. tools/device/ocl_session.sh
BUDGET=${BUDGET:-520} TEST_OPENCL_TIMEOUT=240
echo "== env: $(nvidia-smi -L | head -1)"
ocl_bw old "$B/old/perfx_opencl_check"
ocl_bw new "$B/perfx_opencl_check"

[ -n "${NO_TESTS:-}" ] || ocl_tests opencl model

echo "== perfx bench --device opencl tg128 (old vs new, interleaved)"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for m in llama-2-7b tinyllama-1.1b; do
    for arm in ${ARMS:-old new}; do
      bin=$B/perfx; [ $arm = old ] && bin=$B/old/perfx
      prof=1; cache=$arm; [ $arm = noprof ] && { prof=0; cache=new; }
      ocl_bench $m $arm $r "$bin" $cache PERFX_OPENCL_QUEUE_PROFILING=$prof
    done
  done
done
echo "== done in $(( $(date +%s) - T0 )) s"
