#!/usr/bin/env bash
# Serving benchmark of perfx alone: starts `perfx serve` on MODEL, runs `perfx bench-serve` against it
# (N concurrent streaming clients on loopback, fixed prompt/output lengths, bounded in requests and
# time), prints the summary and writes JSON.
#
# usage: bench/serve/run_load.sh [MODEL]          (default: models/default)
# environment (defaults in brackets):
#   PERFX_BIN [build/perfx]  CLIENTS [16]  REQUESTS [128]  DURATION [300]  PROMPT_TOKENS [128]
#   MAX_TOKENS [128]  THREADS [all cores]  CTX [model's]  MAX_BATCH [CLIENTS]  CHAT [0]
#   OUT [bench/serve/out/perfx.json]  EXTRA_SERVE_ARGS []
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/common.sh"

model="${1:-$repo/models/default}"
perfx="${PERFX_BIN:-$repo/build/perfx}"
clients="${CLIENTS:-16}"
out="${OUT:-$here/out/perfx.json}"
mkdir -p "$(dirname "$out")"

port="$(free_port)"
serve_args=(-m "$model" --port "$port" --max-batch "${MAX_BATCH:-$clients}")
[[ -n "${THREADS:-}" ]] && serve_args+=(-t "$THREADS")
[[ -n "${CTX:-}" ]] && serve_args+=(-c "$CTX")
# shellcheck disable=SC2206
[[ -n "${EXTRA_SERVE_ARGS:-}" ]] && serve_args+=($EXTRA_SERVE_ARGS)
"$perfx" serve "${serve_args[@]}" >"$out.serve.log" 2>&1 &
pid=$!
trap 'stop_pid $pid' EXIT
wait_http "http://127.0.0.1:$port/health" 120

load_args=(--url "http://127.0.0.1:$port" --clients "$clients" --requests "${REQUESTS:-128}"
           --duration "${DURATION:-300}" --prompt-tokens "${PROMPT_TOKENS:-128}"
           --max-tokens "${MAX_TOKENS:-128}" --json "$out" --label perfx)
[[ "${CHAT:-0}" == 1 ]] && load_args+=(--chat)
"$perfx" bench-serve "${load_args[@]}"
curl -fsS "http://127.0.0.1:$port/metrics" >"$out.metrics.txt"
echo "bench/serve: results in $out (server log $out.serve.log, metrics $out.metrics.txt)"
