#!/usr/bin/env bash
# Twenty-second session, call 3: the committed tree's binaries after the PDL coherence audit's two
# fixes (docs/cuda_linear_notes.md §28: copy_rows_kernel's gather and splitk_reduce_kernel's
# partials read coherently). The engine suite (cuda_suite: conformance fp16 / bf16, model tests
# with CudaDecodeBits.DecodeRepeats, whose prompt step runs the gather), memcheck over the decode
# repeat test, the GEMM family of the linear kernel test with and without PDL on the GEMM
# (PERFX_CUDA_PDL_GEMM=1: split-K's reduction waits on the GEMM), then tg128 / pp512 of both
# shapes against the previous binary (.devpack/old.tar.xz), interleaved.
#   run: command "bash tools/device/session_verify22.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-500}
L=/tmp/v22 && mkdir -p $L
mkdir -p /tmp/kt && tar -xJf .devpack/kt.tar.xz -C /tmp
mkdir -p /tmp/old && tar -xJf .devpack/old.tar.xz -C /tmp/old
cuda_suite $L
grep -E '^\[ +(OK|FAILED) +\].*DecodeBits' $L/model.log
PERFX_TEST_DEVICE=cuda:0 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 "$B/tests/test_model" \
  --gtest_filter='*DecodeRepeats*cuda*' > $L/mc.log 2>&1
echo "memcheck DecodeRepeats rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc.log) $(gtest_line $L/mc.log)"
for pdl in 0 1; do
  PERFX_CUDA_PDL_GEMM=$pdl timeout 120 /tmp/kt/linear_kernels_test --only gemm > $L/gemm_$pdl.log 2>&1
  kernel_line "gemm PDL_GEMM=$pdl" $? $L/gemm_$pdl.log
  PERFX_CUDA_PDL_GEMM=$pdl timeout 120 /tmp/kt/linear_kernels_test --only auto > $L/auto_$pdl.log 2>&1
  kernel_line "auto PDL_GEMM=$pdl" $? $L/auto_$pdl.log
done
echo "tests $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for m in llama-2-7b tinyllama-1.1b; do
    tg_line "new r$round" "$B/perfx" "random:$m"
    tg_line "old r$round" /tmp/old/.devbin/perfx "random:$m"
  done
done
for bin in "$B/perfx" /tmp/old/.devbin/perfx; do
  over_budget && continue
  timeout 120 "$bin" bench -m random:llama-2-7b --device cuda -p 512 -n 0 -r 3 > $L/pp.md 2>&1
  echo "$bin 7B pp512: $(grep pp512 $L/pp.md | awk -F'|' '{print $(NF-1)}')"
done
tar -czf "$OUT/v22_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
