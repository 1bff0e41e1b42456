#!/usr/bin/env bash
# Thirty-fifth session: the review's fixes to the CUDA backend's host code — the GPU made current
# on whichever thread calls the backend (a server steps it on its scheduler thread), a capture that
# an op's throw breaks off discarded instead of cached and replayed, buffers grown by allocating
# the new one before freeing the old, an int4 weight's out-of-memory error naming its own bytes.
# First the four new conformance cases on the binary before the fixes (.devpack/old_conformance:
# HEAD a64cd6a's backend with this commit's tests; on one GPU three should fail, the thread case
# needs cuda:1 to fail), then on the fixed binary: the whole CUDA conformance suite (fp16, bf16) and
# model tests, memcheck over the new cases and the overlap cases, the 64-stream server e2e test
# (the scheduler thread on cuda:0), and tg128 -r 5 on TinyLlama and 7B AWQ (the per-call device
# check sits outside the replayed graph; the figures should match the last session's); ~4 min.
#   run: command "bash tools/device/session_fixes35.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
NEW='*AStepThatThrows*cuda*:*StepsFromAnotherThread*cuda*:*OutOfMemoryNames*cuda*:*AFailedLayoutGrowth*cuda*'
OLD=/tmp/devbin/old_conformance
xz -dc "$ROOT/.devpack/old_conformance.xz" > "$OLD" && chmod +x "$OLD"
for arm in old new; do
  bin=$OLD
  [ $arm = new ] && bin=$B/tests/test_conformance
  PERFX_TEST_DEVICE=cuda:0 timeout 120 "$bin" --gtest_filter="$NEW" > "$OUT/$arm.log" 2>&1
  echo "$arm binary, the new cases rc=$?: $(gtest_line "$OUT/$arm.log")"
  grep -E '^\[  FAILED  \].*cuda|Failure|Expected|Which is|  Actual|unknown file' "$OUT/$arm.log" |
    grep -v '^\[  FAILED  \] [0-9]' | head -12 | cut -c1-240
done
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
# (the two cases that fill the GPU's memory stay out: memcheck reports each refused cudaMalloc)
memcheck_gtest test_conformance '*AStepThatThrows*cuda*:*StepsFromAnotherThread*cuda*' memcheck_new.log \
  "the new cases without a full GPU"
memcheck_gtest test_model '*EngineOverlap*cuda*' memcheck_model.log EngineOverlap
over_budget || serve64 "$B/perfx"
for m in tinyllama-1.1b llama-2-7b; do reps fixed "$B/perfx" "$m" -p 0 -n 128; done
echo "total $(( $(date +%s) - T0 )) s"
