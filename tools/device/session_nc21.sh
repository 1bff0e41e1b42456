#!/usr/bin/env bash
# Twenty-first session: w4_gemv3's activations loaded with ld.global.nc under PDL. One engine's
# decode was not repeatable (L2Warm.DISABLED_Repeatable: every logit of steps >= 1 differs by up
# to ~2e-3 between runs) unless w4_gemv3 ran without PDL. This binary loads them with plain
# ld.global (coherent): the repeatability diagnostic, then tg128 against the previous binary.
#   run: command "bash tools/device/session_nc21.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-200}
T="$B/tests/test_model --gtest_also_run_disabled_tests --gtest_filter=*L2Warm*Repeatable*cuda*"
for env in "X=1" "PERFX_CUDA_W4_GEMV=v3" "PERFX_CUDA_PDL_GEMV3=entry"; do
  echo "== $env: $(env PERFX_TEST_DEVICE=cuda:0 $env timeout 60 $T 2>&1 | grep DIAG | sed 's/DIAG mib=0 //' | cut -d, -f1,2,3 | tr '\n' ';')"
done
PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_model" --gtest_filter='*L2Warm*cuda*' > /tmp/l2w.log 2>&1
echo "L2Warm rc=$?: $(gtest_line /tmp/l2w.log)"
for round in 1 2; do
  for m in tinyllama-1.1b llama-2-7b; do
    tg_line "ld.global" "$B/perfx" "random:$m"
    tg_line "ld.global.nc (HEAD)" "$B/perfx_head" "random:$m"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
