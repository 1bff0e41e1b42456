#!/usr/bin/env bash
# The table of a fuzz-long.sh work folder (also of one whose run was interrupted or is still going):
# per target, executions, exec/s, coverage (cov / ft of libFuzzer's last stats line), wall and CPU
# seconds (user + system: less than the wall time when the cores were shared) and reproducers.
#
#   scripts/fuzz-report.sh DIR [TARGET...]     (default: every target folder in DIR)
#
# Exit code 1 when any target crashed, leaked, hit a UBSan report, timed out on one input or ran
# out of memory (the reproducer paths are printed), 2 for a missing folder.
set -euo pipefail
OUT=${1:?usage: fuzz-report.sh DIR [TARGET...]}
shift
[ -d "$OUT" ] || { echo "fuzz-report: no such folder: $OUT" >&2; exit 2; }
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  for d in "$OUT"/*/; do [ -f "$d/log" ] && TARGETS+=("$(basename "$d")"); done
fi
fail=0
printf "%-16s %14s %9s %7s %8s %8s %8s %8s\n" target executions exec/s cov ft seconds cpu_s crashes
for t in "${TARGETS[@]}"; do
  dir="$OUT/$t"
  [ -f "$dir/log" ] || { echo "fuzz-report: no log for $t in $OUT" >&2; fail=1; continue; }
  # Final stats (a finished run), else the last status line (#N ... exec/s: R).
  last=$(grep -E '^#[0-9]+.*cov: [0-9]+ ft: [0-9]+' "$dir/log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")
  [ -n "$rate" ] || rate=$(sed -n 's/.*exec\/s: \([0-9]*\).*/\1/p' <<<"$last")
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  # libFuzzer's findings: crash-, leak-, timeout-, oom- (slow-unit- files are reports, not faults).
  crashes=$( (find "$dir/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o \
              -name 'timeout-*' -o -name 'oom-*' \) 2>/dev/null || true) | wc -l)
  rc=$(cat "$dir/rc" 2>/dev/null || true)
  cpu=$(awk '{printf "%d", $1 + $2}' "$dir/cpu" 2>/dev/null || true)
  secs=$(cat "$dir/seconds" 2>/dev/null || echo running)
  printf "%-16s %14s %9s %7s %8s %8s %8s %8s\n" "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "$secs" "${cpu:-?}" "$crashes"
  if [ "$rc" = 72 ] && [ "$crashes" -eq 0 ]; then
    echo "  $t was interrupted (exit code 72, no finding)" >&2
  elif [ "$crashes" -gt 0 ] || [ -n "$rc" ]; then
    fail=1
    echo "  $t FAILED (exit code ${rc:-none}; log $dir/log); reproducers:" >&2
    (find "$dir/artifacts" -type f 2>/dev/null || true) | sed 's/^/    /' >&2
  fi
done
echo "logs, corpora and artifacts: $OUT" >&2
exit $fail
