#!/usr/bin/env bash
# Long fuzzing: runs every fuzz target (or the ones named) for a time budget each, or until N
# executions, JOBS targets at a time (default: the free cores, nproc - 1, at least 1), each under
# `nice`, from a copy of its committed corpus (the repo is not modified), then prints a table:
# target, executions, exec/s, coverage (cov / ft of libFuzzer's last stats line), wall time, CPU
# time (user + system seconds: less than the wall time when the cores were shared), crashes.
#
#   scripts/fuzz-long.sh [-t SECONDS] [-n RUNS] [-j JOBS] [-o DIR] [-b BUILD_DIR] [TARGET...]
#
#   -t SECONDS  time per target (default 3600)      -n RUNS  stop a target after RUNS executions
#   -j JOBS     targets run at once                  -o DIR   work folder (kept: corpora, logs,
#   -b BUILD    the fuzz build folder (build-fuzz;            artifacts; default a new temp dir)
#               built with the 'fuzz' preset when missing)
# Exit code 1 when any target crashed, leaked, hit a UBSan report, timed out on one input or ran
# out of memory (the reproducer paths are printed).
set -euo pipefail
cd "$(dirname "$0")/.."
ALL_TARGETS=(gguf safetensors hf_config tokenizer_json tokenize chat_template openai_request stop_strings)
TIME=3600 RUNS=-1 JOBS=$(( $(nproc) > 1 ? $(nproc) - 1 : 1 )) OUT="" BUILD=build-fuzz
while getopts "t:n:j:o:b:h" opt; do
  case $opt in
    t) TIME=$OPTARG ;; n) RUNS=$OPTARG ;; j) JOBS=$OPTARG ;; o) OUT=$OPTARG ;; b) BUILD=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")
if [ ! -x "$BUILD/tests/fuzz/fuzz_${TARGETS[0]}" ]; then
  cmake --preset fuzz >/dev/null && cmake --build "$BUILD" -j"$(nproc)"
fi
OUT=${OUT:-$(mktemp -d /tmp/perfx-fuzz-long.XXXXXX)}
mkdir -p "$OUT"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

run_one() {
  local t=$1 dir="$OUT/$1"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$dir/corpus/"
  local dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="tests/fuzz/dict/$t.dict")
  local start end
  start=$(date +%s)
  local TIMEFORMAT='%U %S'  # the CPU seconds the target got (the cores may be shared)
  { time { nice -n 10 "$BUILD/tests/fuzz/fuzz_$t" "$dir/corpus" "${dict[@]}" \
    -max_total_time="$TIME" -runs="$RUNS" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1 || echo $? >"$dir/rc"; }; } 2>"$dir/cpu"
  end=$(date +%s)
  echo $((end - start)) >"$dir/seconds"
}

echo "fuzz-long: ${#TARGETS[@]} targets, ${TIME}s each (runs: $RUNS), $JOBS at a time; work folder $OUT" >&2
running=0
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

# The table, and exit code 1 for any finding (scripts/fuzz-report.sh).
exec scripts/fuzz-report.sh "$OUT" "${TARGETS[@]}"  # the script cd-ed to the repo root
