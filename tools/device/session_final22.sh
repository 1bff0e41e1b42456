#!/usr/bin/env bash
# Twenty-second session, call 4: the binaries after the review of the PDL audit (kernels.cu's norm,
# penalty and layout loads rewritten so each read-only load has its own marked statement;
# frag::ld_weight_nc renamed from ld_stream_na; docs/cuda_linear_notes.md §28): the linear kernel
# families (prebuilt, .devpack/kt.tar.xz) with memcheck, the engine suite, memcheck over the
# conformance cases of the rewritten kernels (norms, sampling with penalties, gather, embedding),
# and tg128 of both shapes against the session's first binary (.devpack/old.tar.xz).
#   run: command "bash tools/device/session_final22.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-400}
L=/tmp/f22 && mkdir -p $L
mkdir -p /tmp/kt && tar -xJf .devpack/kt.tar.xz -C /tmp
mkdir -p /tmp/old && tar -xJf .devpack/old.tar.xz -C /tmp/old
OUT=$L/lin PREBUILT=/tmp/kt/linear_kernels_test SKIP_BENCH=1 timeout 200 \
  bash tools/device/cuda_linear_kernels.sh > $L/lin.log 2>&1
echo "linear kernels rc=$?"; grep -E '^(gemv|gemm|dense|w8|auto|graph)|memcheck|host checks' $L/lin.log
cuda_suite $L
F='*RmsNorm*/cuda*:*Embedding/cuda*:*GatherRows/cuda*:*Sample*/cuda*'
PERFX_TEST_DEVICE=cuda:0 timeout 200 "$SAN" --tool memcheck --error-exitcode 3 "$B/tests/test_conformance" \
  --gtest_filter="$F" > $L/mc.log 2>&1
echo "memcheck conformance (norms, embedding, gather, sampling) rc=$?: $(grep -m1 'ERROR SUMMARY' $L/mc.log) $(gtest_line $L/mc.log)"
echo "tests $(( $(date +%s) - T0 )) s"
for m in llama-2-7b tinyllama-1.1b; do
  tg_line "new" "$B/perfx" "random:$m"
  tg_line "old" /tmp/old/.devbin/perfx "random:$m"
done
tar -czf "$OUT/f22_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
# (The call's memcheck line used a filter that matched no test, '*cuda*RmsNorm*...'; it was run
# again with the filter above as its own call: . tools/device/devbin.sh, then the two lines.)
