#!/usr/bin/env bash
# Thirteenth session, the final binary (symmetric Q4_0 records, 8-slot ring, two activation
# buffers): the GEMV kernel tests and memcheck over them, CUDA conformance fp16 / bf16 (and its
# linear cases with W4A8 forced on w4_gemv3: the symmetric A8 instance), CUDA model tests, tg128
# once on the Q4_0 and AWQ shapes, then tools/device/llamacpp_peer.sh (STEPS="tiny 7b": llama.cpp CUDA and perfx on
# the same random-weight Q4_0 GGUF files, back to back).
#   run: command "bash tools/device/session_final13.sh", carry [".devpack", ".devshared"]
#   (.devpack: a bin.tar.xz with perfx, test_conformance, test_model and the linear kernel test
#   only, compressed with XZ_OPT=-9e; llama.tar.xz; ggml-vocab-llama-spm.gguf; lib/)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-560}
L=/tmp/final13 && mkdir -p $L
T=$B/lin/linear_kernels_test
timeout 120 "$T" --only gemv > $L/test_gemv.log 2>&1
kernel_line gemv $? $L/test_gemv.log
grep '^FAIL' $L/test_gemv.log | head -4 | cut -c1-200
timeout 120 "$SAN" --tool memcheck --error-exitcode 3 "$T" --quick --only gemv > $L/memcheck_gemv.log 2>&1
echo "memcheck gemv --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' $L/memcheck_gemv.log)) pass $(grep -c '^PASS' $L/memcheck_gemv.log)"
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
    --gtest_filter='*cuda*' > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
  grep -h -E "Failure|FAILED" $L/conf_$dt.log | head -4 | cut -c1-200
  PERFX_CUDA_W4A8=1 PERFX_CUDA_W4_GEMV=v3 PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 \
    "$B/tests/test_conformance" --gtest_filter='*Linear*cuda*' > $L/conf_a8_$dt.log 2>&1
  echo "conformance Linear W4A8 on v3 $dt rc=$?: $(gtest_line $L/conf_a8_$dt.log)"
done
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model rc=$?: $(gtest_line $L/model.log)"
echo "tests $(( $(date +%s) - T0 )) s"
for m in random:llama-2-7b:q4_0 random:tinyllama-1.1b:q4_0 random:llama-2-7b random:tinyllama-1.1b; do
  over_budget && continue
  timeout 90 "$B/perfx" bench -m $m --device cuda -p 0 -n 128 -r 3 > $L/b.md 2>&1
  echo "$m tg128: $(grep tg128 $L/b.md | awk -F'|' '{print $(NF-1)}')"
done
G=/tmp/peer_gguf
OUT=$L STEPS="tiny 7b" GGUF_DIR=$G PERFX=$B/perfx BUDGET=240 timeout 300 bash tools/device/llamacpp_peer.sh \
  > $L/peer.log 2>&1
echo "peer rc=$?"
sed -n '/==== SUMMARY/,$p' $L/peer.log
rm -f $G/*.gguf
tar -czf "$OUT/final13_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
