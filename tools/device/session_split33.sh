#!/usr/bin/env bash
# Thirty-third session: the CUDA backend's host code split into cuda_backend_impl.h (the class) and
# cuda_{backend,weights,ops,sampling}.cpp (its members by concern), meant as a move with no change
# of behaviour. The CUDA conformance suite (fp16, bf16) and model tests, memcheck over the sampling
# and overlap cases, bench's and the server's e2e cases on cuda:0, a PERFX_CUDA_PROFILE=1 run (the
# per-op profile's code moved too), then tg128 on TinyLlama and 7B AWQ and pp512 on 7B, -r 5, to
# compare with session_head33.sh's figures for 512c43b (same kind of machine only); ~4 min.
#   run: command "bash tools/device/session_split33.sh", kind nvidia-h200, carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
export PERFX_DEFAULT_MODEL=$ROOT/models/default
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
cuda_suite "$OUT" "f16 bf16"
grep -h -E "Failure|FAILED" "$OUT"/conf_*.log "$OUT/model.log" 2>/dev/null | head -6 | cut -c1-220
memcheck_gtest test_conformance '*Sample*cuda*' memcheck.log "conformance *Sample*"
memcheck_gtest test_model '*EngineOverlap*cuda*' memcheck_model.log EngineOverlap
e2e_on perfx 'CliBench.*'
PERFX_TEST_SERVE_ARGS="--device cuda" PERFX_TEST_BIN="$B/perfx" timeout 200 \
  "$B/tests/test_e2e" --gtest_filter='ServeE2E.*' > "$OUT/serve_all.log" 2>&1
echo "serve e2e (all) on cuda rc=$?: $(gtest_line "$OUT/serve_all.log")"
grep -E '^\[  FAILED' "$OUT/serve_all.log" | head -5
PERFX_CUDA_PROFILE=1 timeout 60 "$B/perfx" run -m "$PERFX_DEFAULT_MODEL" --device cuda \
  -p "Once upon a time" -n 16 > "$OUT/profile_run.txt" 2> "$OUT/profile_run.err"
echo "profile run rc=$?: $(grep -c '^  ' "$OUT/profile_run.err") op lines; $(grep -m1 'linear' "$OUT/profile_run.err" | cut -c1-120)"
reps split "$B/perfx" tinyllama-1.1b -p 0 -n 128
reps split "$B/perfx" llama-2-7b -p 0 -n 128
reps split "$B/perfx" llama-2-7b -p 512 -n 0
echo "total $(( $(date +%s) - T0 )) s"
