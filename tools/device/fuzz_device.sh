#!/usr/bin/env bash
# Fuzzing on the device machine's CPU cores (issue 13: the 2-core development VM cannot give the
# slower targets 10 million executions in a session). Runs libFuzzer's -jobs/-workers mode: W
# independent fuzzing processes per target sharing one corpus folder, each for SECONDS, all
# targets at once, then writes $OUT/fuzz_summary.txt: per target the executions summed over its
# jobs, the largest cov/ft, and any reproducers (also tarred into $OUT/artifacts.tar.gz).
#
# Needs .devfuzz/bin.tar.xz (the fuzz_* binaries of `cmake --preset fuzz`, built on the VM) and
# .devfuzz/lib (libraries the device lacks), carried by the run call:
#   tar -C build-fuzz/tests/fuzz -cJf .devfuzz/bin.tar.xz fuzz_gguf fuzz_chat_template ...
#   git rev-parse --short HEAD >.devfuzz/commit   (the device's checkout may not show the commit)
#   TARGETS="gguf:5 chat_template:5 openai_request:5" SECONDS_PER_JOB=420 bash tools/device/fuzz_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
TARGETS=${TARGETS:-"gguf:5 chat_template:5 openai_request:5"}
SECONDS_PER_JOB=${SECONDS_PER_JOB:-420}
ROOT=$(pwd)
WORK=$(mktemp -d /tmp/fuzz-device.XXXXXX)
mkdir -p "$WORK/bin" "$OUT"
tar -C "$WORK/bin" -xJf .devfuzz/bin.tar.xz
export LD_LIBRARY_PATH="$ROOT/.devfuzz/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
{
  echo "binaries: $(cat .devfuzz/commit 2>/dev/null || echo '?'); $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "targets: $TARGETS; ${SECONDS_PER_JOB}s per job"
} >"$OUT/fuzz_summary.txt"
for spec in $TARGETS; do
  t=${spec%%:*} w=${spec##*:}
  d="$WORK/$t"
  mkdir -p "$d/corpus" "$d/artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$d/corpus/"
  dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="$ROOT/tests/fuzz/dict/$t.dict")
  (cd "$d" && "$WORK/bin/fuzz_$t" corpus "${dict[@]}" -jobs="$w" -workers="$w" \
     -max_total_time="$SECONDS_PER_JOB" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
     -artifact_prefix="$d/artifacts/" >"$d/main.log" 2>&1) &
done
wait
printf "%-16s %5s %14s %7s %8s %8s %6s\n" target jobs executions cov ft crashes slow >>"$OUT/fuzz_summary.txt"
for spec in $TARGETS; do
  t=${spec%%:*}
  d="$WORK/$t"
  execs=$(cat "$d"/fuzz-*.log 2>/dev/null | sed -n 's/^stat::number_of_executed_units: *//p' |
          awk '{s += $1} END {print s + 0}')
  jobs=$(cat "$d"/fuzz-*.log 2>/dev/null | grep -c '^stat::number_of_executed_units' || true)
  cov=$(cat "$d"/fuzz-*.log 2>/dev/null | sed -n 's/^#[0-9].*cov: \([0-9]*\) ft: \([0-9]*\).*/\1 \2/p' |
        sort -n | tail -1)
  crashes=$(find "$d/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
             -o -name 'oom-*' \) | wc -l)  # slow-unit-* are reports, not faults
  slow=$(find "$d/artifacts" -type f -name 'slow-unit-*' | wc -l)
  printf "%-16s %5s %14s %7s %8s %8s %6s\n" "$t" "$jobs" "$execs" "${cov%% *}" "${cov##* }" \
    "$crashes" "$slow" >>"$OUT/fuzz_summary.txt"
  if [ "$crashes" -gt 0 ]; then
    for l in "$d"/fuzz-*.log; do
      grep -q -E 'ERROR|SUMMARY|FUZZ_ASSERT|runtime error' "$l" && tail -60 "$l" >>"$OUT/crash_logs.txt"
    done
  fi
done
find "$WORK" -path '*/artifacts/*' -type f | grep -q . &&
  tar -C "$WORK" -czf "$OUT/artifacts.tar.gz" $(cd "$WORK" && find . -path '*/artifacts/*' -type f)
cat "$OUT/fuzz_summary.txt"
