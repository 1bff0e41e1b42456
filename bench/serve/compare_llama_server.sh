#!/usr/bin/env bash
# The same serving load against perfx serve and llama.cpp's llama-server, on the same model file and
# machine, one server at a time, and a Markdown table of the two (bench/serve/report.py).
#
# usage: bench/serve/compare_llama_server.sh LLAMA_SERVER MODEL_GGUF [PERFX_MODEL]
#   LLAMA_SERVER  the llama-server binary (an already built llama.cpp; this script builds nothing)
#   MODEL_GGUF    the model as GGUF, loaded by llama-server (and by perfx unless PERFX_MODEL is given)
#   PERFX_MODEL   what perfx loads instead (e.g. the HF folder the GGUF was converted from)
# environment (defaults in brackets):
#   PERFX_BIN [build/perfx]  CLIENTS [16]  REQUESTS [128]  DURATION [300]  PROMPT_TOKENS [128]
#   MAX_TOKENS [128]  THREADS [nproc]  CTX [512]: context per sequence (llama-server gets
#   -c CTX*CLIENTS with -np CLIENTS, i.e. the same per-slot context)  CHAT [0]
#   OUT_DIR [bench/serve/out]
# On the GPU machine, tools/device/serve_vs_llama.sh runs the same load generator against
# `perfx serve --device cuda` and a CUDA llama-server (-fa, -np = clients) at 1 / 16 / 64 / 256
# clients and prompts 128 / 512 in one call (issue 10's table: docs/SERVING.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/common.sh"

if [[ $# -lt 2 ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
llama_server="$1"
gguf="$2"
perfx_model="${3:-$gguf}"
perfx="${PERFX_BIN:-$repo/build/perfx}"
clients="${CLIENTS:-16}"
threads="${THREADS:-$(nproc)}"
ctx="${CTX:-512}"
out_dir="${OUT_DIR:-$here/out}"
mkdir -p "$out_dir"
[[ -x "$llama_server" ]] || { echo "not an executable: $llama_server" >&2; exit 2; }
[[ -f "$gguf" ]] || { echo "no such model file: $gguf" >&2; exit 2; }

load() {  # load LABEL PORT
  local args=(--url "http://127.0.0.1:$2" --clients "$clients" --requests "${REQUESTS:-128}"
              --duration "${DURATION:-300}" --prompt-tokens "${PROMPT_TOKENS:-128}"
              --max-tokens "${MAX_TOKENS:-128}" --json "$out_dir/$1.json" --label "$1")
  [[ "${CHAT:-0}" == 1 ]] && args+=(--chat)
  "$perfx" bench-serve "${args[@]}"
}

# 1. perfx serve
port="$(free_port)"
"$perfx" serve -m "$perfx_model" --port "$port" --max-batch "$clients" -t "$threads" -c "$ctx" \
  >"$out_dir/perfx.serve.log" 2>&1 &
pid=$!
trap 'stop_pid $pid' EXIT
wait_http "http://127.0.0.1:$port/health" 120
echo "== perfx serve ($perfx_model)"
load perfx "$port"
stop_pid "$pid"

# 2. llama-server: one slot per client, each with the same context, continuous batching on.
port="$(free_port)"
"$llama_server" -m "$gguf" --host 127.0.0.1 --port "$port" -np "$clients" -c $((ctx * clients)) \
  -t "$threads" -tb "$threads" --cont-batching --no-webui >"$out_dir/llama-server.log" 2>&1 &
pid=$!
wait_http "http://127.0.0.1:$port/health" 300
echo "== llama-server ($gguf)"
load llama-server "$port"
stop_pid "$pid"
trap - EXIT

python3 "$here/report.py" "$out_dir/perfx.json" "$out_dir/llama-server.json" | tee "$out_dir/report.md"
