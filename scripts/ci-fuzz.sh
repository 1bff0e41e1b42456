#!/usr/bin/env bash
# CI fuzzing: configures and builds the fuzz preset (clang, libFuzzer + ASan + UBSan; build-fuzz),
# then runs every fuzz target for a short budget (RUNS below; PERFX_FUZZ_SECONDS caps it, default
# 90) from a temporary copy of its committed corpus (tests/fuzz/corpus/<target>, so the repo is not modified) with its
# dictionary, PERFX_FUZZ_JOBS targets at a time (default: nproc). Fails (exit 1) on any crash,
# leak, UBSan report, timeout or out-of-memory, printing the log tail and the reproducer path;
# reproduce with build-fuzz/tests/fuzz/fuzz_<target> <reproducer>. About 5 minutes on 2 cores from
# a clean build folder (tests/fuzz/README.md).
#
# The run is deterministic: a fixed seed (PERFX_FUZZ_SEED, default 1) and a fixed number of
# executions per target (RUNS below, ~20-30 s each on one core of the development VM), with
# PERFX_FUZZ_SECONDS only as a cap for a slow machine (which then runs a prefix of the same
# sequence). So CI tests the inputs tested before the commit, and a crash there reproduces here;
# open-ended fuzzing for new faults is scripts/fuzz-long.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${PERFX_FUZZ_SECONDS:-90}
SEED=${PERFX_FUZZ_SEED:-1}
# PERFX_FUZZ_MODE=replay runs every committed corpus input once (deterministic: the regression
# step of CI); the default, fuzz, mutates from the corpus as described above.
MODE=${PERFX_FUZZ_MODE:-fuzz}
ROOT=$PWD
JOBS=${PERFX_FUZZ_JOBS:-$(nproc)}
TARGETS=(gguf safetensors hf_config tokenizer_json tokenize chat_template openai_request stop_strings)
declare -A RUNS=([gguf]=250000 [safetensors]=1000000 [hf_config]=750000 [tokenizer_json]=250000
                 [tokenize]=15000 [chat_template]=250000 [openai_request]=400000 [stop_strings]=750000)

cmake --preset fuzz >/dev/null
cmake --build build-fuzz -j"$(nproc)"

WORK=$(mktemp -d /tmp/perfx-ci-fuzz.XXXXXX)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

run_target() {
  local t=$1 dir="$WORK/$1"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  # The seeds go in by name, sorted, without the start-up shuffle: libFuzzer would otherwise take a
  # directory in readdir order (filesystem-dependent), and seeds of equal size would run in a
  # different order on another machine. New inputs go to $dir/corpus, never re-read (-reload=0).
  find "$PWD/tests/fuzz/corpus/$t" -type f | LC_ALL=C sort | paste -sd, - >"$dir/seeds"
  if [ "$MODE" = replay ]; then  # every committed input once: seeds and reproducers
    if (cd "$dir/artifacts" && "$ROOT/build-fuzz/tests/fuzz/fuzz_$t" $(tr , ' ' <"$dir/seeds")) \
        >"$dir/log" 2>&1; then
      echo ok >"$dir/status"
    else
      echo "failed (exit $?)" >"$dir/status"
    fi
    return
  fi
  if build-fuzz/tests/fuzz/fuzz_"$t" "$dir/corpus" -dict="tests/fuzz/dict/$t.dict" \
      -seed_inputs=@"$dir/seeds" -shuffle=0 -reload=0 -seed="$SEED" -runs="${RUNS[$t]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1; then
    echo ok >"$dir/status"
  else
    echo "failed (exit $?)" >"$dir/status"
  fi
}

if [ "$MODE" = replay ]; then
  echo "ci-fuzz: ${#TARGETS[@]} targets, replaying the committed corpora (work folder $WORK)"
else
  echo "ci-fuzz: ${#TARGETS[@]} targets, seed $SEED, a fixed number of runs each (at most ${SECONDS_PER_TARGET}s), $JOBS at a time (work folder $WORK)"
fi
running=0
for t in "${TARGETS[@]}"; do
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

fail=0
for t in "${TARGETS[@]}"; do
  dir="$WORK/$t"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  artifacts=$(find "$dir/artifacts" -type f)
  if [ "$(cat "$dir/status" 2>/dev/null)" = ok ] && [ -z "$artifacts" ]; then
    note=""
    if [ "$MODE" = replay ]; then
      execs=$(tr , '\n' <"$dir/seeds" | wc -l) note=" (the committed corpus, once)"
    elif [ "${execs:-0}" -lt "${RUNS[$t]}" ]; then
      note=" (the ${SECONDS_PER_TARGET}s cap stopped it before ${RUNS[$t]})"
    fi
    printf "  %-16s ok   %10s executions%s\n" "$t" "${execs:-?}" "$note"
  else
    fail=1
    printf "  %-16s FAIL (%s)\n" "$t" "$(cat "$dir/status" 2>/dev/null || echo 'no status')"
    tail -n 40 "$dir/log" | sed 's/^/    | /'
    for a in $artifacts; do
      echo "    reproducer: $a"
      echo "    rerun:      build-fuzz/tests/fuzz/fuzz_$t $a"
    done
  fi
done
if [ "$fail" -ne 0 ]; then
  echo "ci-fuzz: FAILED (logs and reproducers kept in $WORK)"
  exit 1
fi
rm -rf "$WORK"
echo "ci-fuzz: all ${#TARGETS[@]} targets passed"
