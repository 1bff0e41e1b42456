#!/usr/bin/env bash
# Thirteenth session: GGUF Q4_0 with symmetric records (docs/cuda_linear_notes.md §21). One call:
#   1. linear_kernels_test families dense / gemv / gemm / auto (the Q4_0-like shapes now pack
#      symmetric records; asymmetric group-32 shapes added), memcheck over --quick gemv and gemm;
#   2. CUDA conformance fp16 / bf16 and the CUDA model tests;
#   3. tg128 on random:llama-2-7b:q4_0 and random:tinyllama-1.1b:q4_0, this binary against
#      perfx_old (.devpack/old.tar.xz: the session's starting binary, b291dfc), interleaved, two
#      rounds; the AWQ 7B shape once each (unchanged path); pp512 7B Q4_0 once each.
#   run: command "bash tools/device/session_sym13.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-560}
mkdir -p /tmp/old && tar -xJf .devpack/old.tar.xz -C /tmp/old
OLD=/tmp/old/perfx_old
T=$B/lin/linear_kernels_test
L=/tmp/sym13 && mkdir -p $L
for fam in dense gemv gemm auto; do
  timeout 120 "$T" --only $fam > $L/test_$fam.log 2>&1
  kernel_line $fam $? $L/test_$fam.log
  grep '^FAIL' $L/test_$fam.log | head -4 | cut -c1-200
done
grep -h -E "^(PASS|FAIL).*(sym|g32)" $L/test_gemv.log | awk '{print $1}' | sort | uniq -c | sed 's/^/  g32 gemv cases: /'
for fam in gemv gemm; do
  timeout 120 "$SAN" --tool memcheck --error-exitcode 3 "$T" --quick --only $fam > $L/memcheck_$fam.log 2>&1
  echo "memcheck $fam --quick: rc=$? ($(grep -m1 'ERROR SUMMARY' $L/memcheck_$fam.log)) pass $(grep -c '^PASS' $L/memcheck_$fam.log)"
done
for dt in f16 bf16; do
  PERFX_CUDA_DTYPE=$dt PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" \
    --gtest_filter='*cuda*' > $L/conf_$dt.log 2>&1
  echo "conformance $dt rc=$?: $(gtest_line $L/conf_$dt.log)"
  grep -h -E "Failure|FAILED" $L/conf_$dt.log | head -4 | cut -c1-200
done
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model rc=$?: $(gtest_line $L/model.log)"
echo "setup + tests $(( $(date +%s) - T0 )) s"
for round in 1 2; do
  for m in random:llama-2-7b:q4_0 random:tinyllama-1.1b:q4_0; do
    tg_line "new r$round" "$B/perfx" $m
    tg_line "old r$round" "$OLD" $m
  done
done
tg new "$B/perfx" random:llama-2-7b
tg old "$OLD" random:llama-2-7b
for who in new old; do
  over_budget && continue
  bin=$B/perfx; [ $who = old ] && bin=$OLD
  timeout 90 "$bin" bench -m random:llama-2-7b:q4_0 --device cuda -p 512 -n 0 -r 3 > $L/pp.md 2>&1
  echo "$who 7B q4_0 pp512: $(grep pp512 $L/pp.md | awk -F'|' '{print $(NF-1)}')"
done
tar -czf "$OUT/sym13_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
