#!/usr/bin/env bash
# Soak test of `perfx serve` (issue 13; not part of CI): mixed streamed / non-streamed load with
# client disconnects, malformed requests, shared prefixes and a KV cache small enough to preempt,
# for DURATION seconds (default 1800), sampling RSS, threads and open fds every 10 s.
#
#   bench/soak/soak.sh [DURATION_S] [extra soak.py flags...]
#   e.g. bench/soak/soak.sh 60 --min-requests 100 --rss-baseline-s 20   # a quick check
#
# Env: PERFX_BIN (default build/perfx), PERFX_MODEL (default models/default), OUT (default
# build/soak: soak_samples.csv, soak_summary.json, the server log). Runs under `nice` so other
# work on the machine goes first. Exit status 0 only when every acceptance check passed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
duration="${1:-1800}"
[[ $# -gt 0 ]] && shift
bin="${PERFX_BIN:-$root/build/perfx}"
model="${PERFX_MODEL:-$root/models/default}"
out="${OUT:-$root/build/soak}"
[[ -x "$bin" ]] || { echo "soak.sh: $bin is missing; build it: cmake --build build --target perfx" >&2; exit 2; }
mkdir -p "$out"
# A copy of the binary, so a rebuild during the soak does not change what runs.
cp "$bin" "$out/perfx"
echo "soak.sh: commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src apps include || echo '+dirty'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
exec nice -n 10 python3 "$here/soak.py" --perfx "$out/perfx" --model "$model" --duration "$duration" \
  --csv "$out/soak_samples.csv" --json "$out/soak_summary.json" "$@"
