#!/usr/bin/env bash
# Seventeenth session: the server's overlapped scheduler (Scheduler, Engine::overlaps_steps) and
# the fed steps it needs (BatchLayout::fed_rows: a subset of the last draw's rows, host ids among
# them). 1) CUDA conformance, the CUDA model tests (EngineOverlap's leave-and-join schedule among
# them), memcheck over its leave-and-join test on cuda; 2) the server end-to-end tests against the GPU
# (PERFX_TEST_SERVE_ARGS="--device cuda"), overlapped and with PERFX_DECODE_OVERLAP=0; 3) serving
# A/B: perfx serve on random:llama-2-7b and random:tinyllama-1.1b (AWQ), bench-serve at 1 / 64 /
# 256 clients (prompt 128, output 128, greedy), overlapped against PERFX_DECODE_OVERLAP=0, the
# arms alternating, then each server's /metrics (step vs host seconds).
#   run: command "bash tools/device/session_async17.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
L=/tmp/as17 && mkdir -p $L
# The test binaries look for models/default under the source tree they were built in.
[ -d /work/main ] || { mkdir -p /work && ln -sfn "$ROOT" /work/main; }

PERFX_TEST_DEVICE=cuda:0 timeout 100 "$B/tests/test_conformance" --gtest_filter='*cuda*' > $L/conf.log 2>&1
echo "conformance rc=$?: $(gtest_line $L/conf.log)"
PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > $L/model.log 2>&1
echo "model rc=$?: $(gtest_line $L/model.log)"
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$SAN" --tool memcheck --error-exitcode 9 \
  "$B/tests/test_model" --gtest_filter='*EngineOverlap.SequencesLeave*cuda*' > $L/memcheck.log 2>&1
echo "memcheck EngineOverlap.SequencesLeave* cuda rc=$?: $(gtest_line $L/memcheck.log) $(grep -m1 'ERROR SUMMARY' $L/memcheck.log)"
E2E='ServeE2E.Overlapped*:ServeE2E.SixtyFour*:ServeE2E.Preemption*:ServeE2E.Disconnect*:ServeE2E.Sigterm*:ServeE2E.Stories260K*'
for ov in 1 0; do
  PERFX_DECODE_OVERLAP=$ov PERFX_TEST_BIN="$B/perfx" PERFX_TEST_SERVE_ARGS="--device cuda" \
    timeout 150 "$B/tests/test_e2e" --gtest_filter="$E2E" > $L/e2e_$ov.log 2>&1
  echo "server e2e on cuda, overlap=$ov rc=$?: $(gtest_line $L/e2e_$ov.log)"
done
grep -h -E "Failure|FAILED|error:" $L/*.log | head -12 | cut -c1-220

port=18741
serve_arm() {  # MODEL OVERLAP LABEL
  over_budget && { echo "$3: skipped (budget)"; return; }
  PERFX_DECODE_OVERLAP=$2 "$B/perfx" serve -m "random:$1" --device cuda --port $port --max-batch 256 \
    > "$OUT/serve_$3.log" 2>&1 &
  local pid=$! t=$(date +%s)
  for i in $(seq 1 150); do curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 1; done
  echo "$3: serve up after $(( $(date +%s) - t )) s"
  for c in ${CLIENTS:-1 64 256}; do
    local n=$(( c < 4 ? 16 : c * 2 ))
    timeout 120 "$B/perfx" bench-serve --url "http://127.0.0.1:$port" --clients $c --requests $n \
      --duration 60 --prompt-tokens 128 --max-tokens 128 --temperature 0 \
      --json "$OUT/serve_$3_c$c.json" > "$OUT/serve_$3_c$c.txt" 2>&1
    echo "$3 c=$c rc=$?: $(tr '\n' ' ' < "$OUT/serve_$3_c$c.txt" | tr -s ' ' | cut -c1-420)"
  done
  curl -fsS "http://127.0.0.1:$port/metrics" | grep -E "^perfx_(engine_steps_total|engine_step_seconds_total|scheduler_host_seconds_total|scheduler_host_cpu_seconds_total|kv_blocks_used) " | tr '\n' ' '
  echo
  kill $pid 2> /dev/null
  wait $pid 2> /dev/null
}
BUDGET=${BUDGET:-500}
serve_arm llama-2-7b 1 7b_on
serve_arm llama-2-7b 0 7b_off
CLIENTS="1 256" serve_arm tinyllama-1.1b 1 tiny_on
CLIENTS="1 256" serve_arm tinyllama-1.1b 0 tiny_off
CLIENTS="1 256" serve_arm llama-2-7b 0 7b_off2
CLIENTS="1 256" serve_arm llama-2-7b 1 7b_on2
echo "total $(( $(date +%s) - T0 )) s"
