#!/usr/bin/env bash
# Issue 10's comparison on one GPU: `perfx serve --device cuda` (random:llama-2-7b, AWQ W4 g128) and
# llama.cpp's llama-server (CUDA, flash attention, -np = clients, continuous batching) on a random
# Llama-2-7B-shape Q4_0 GGUF, one server at a time, under `perfx bench-serve` (unique prompts,
# ignore_eos): output tok/s, TTFT and TPOT p50/p99 per (prompt tokens, clients).
#
#   run: command "bash tools/device/serve_vs_llama.sh", carry [".devpack"], with
#     .devpack/bin.tar.xz                 perfx (tools/device/pack_cuda_bins.sh)
#     .devpack/llama-server.tar.xz        llama-server (llama.cpp CUDA, sm_90, static ggml; built on
#                                         the development machine, never in this repository:
#                                         cmake -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#                                         -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF
#                                         -DGGML_CUDA_FA_ALL_QUANTS=OFF; target llama-server)
#     .devpack/ggml-vocab-llama-spm.gguf  tokenizer.* keys for the GGUF (llama.cpp's models/)
# Environment: CONFIGS (default "128:256 128:1 128:16 128:64 512:256 512:1 512:16 512:64", each
# PROMPT:CLIENTS, run in that order by each engine), ENGINES ("perfx llama"), REQS_<P>_<C> (requests;
# default 2 per client, at least 8, for prompt 128 and 1 per client, at least 4, for longer
# prompts), BUDGET (s, default 540: a configuration is skipped once the call has run that long;
# perfx runs all its configurations first, so a late cut drops llama-server's last ones),
# PERFX_MODEL (random:llama-2-7b), SERVE_ARGS (extra perfx serve flags), LLAMA_ARGS (extra
# llama-server flags).
# Logs and JSON go to /tmp/svl, packed into $OUT/svl.tar.gz; the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/perfx_out}
L=/tmp/svl
rm -rf "$L" && mkdir -p "$L" "$OUT"
. tools/device/devbin.sh
BUDGET=${BUDGET:-540}
CONFIGS=${CONFIGS:-"128:256 128:1 128:16 128:64 512:256 512:1 512:16 512:64"}
ENGINES=${ENGINES:-"perfx llama"}
OUTPUT_TOKENS=128
elapsed() { echo $(($(date +%s) - T0)); }
say() { echo "[$(elapsed) s] $*" | tee -a "$L/summary.txt"; }
nreq() {  # nreq PROMPT CLIENTS
  local v="REQS_$1_$2"
  if [ -n "${!v:-}" ]; then echo "${!v}"; elif [ "$1" -le 128 ]; then
    echo $(($2 * 2 > 8 ? $2 * 2 : 8))
  else echo $(($2 > 4 ? $2 : 4)); fi
}
wait_up() {  # wait_up PORT PID SECONDS
  for _ in $(seq 1 "$3"); do
    curl -fsS "http://127.0.0.1:$1/health" > /dev/null 2>&1 && return 0
    kill -0 "$2" 2> /dev/null || return 1
    sleep 1
  done
  return 1
}
stop() { kill "$1" 2> /dev/null; for _ in $(seq 1 100); do kill -0 "$1" 2> /dev/null || break; sleep 0.1; done; kill -9 "$1" 2> /dev/null; wait "$1" 2> /dev/null; }
load() {  # load ENGINE PORT PROMPT CLIENTS
  local n
  n=$(nreq "$3" "$4")
  timeout 300 "$B/perfx" bench-serve --url "http://127.0.0.1:$2" --clients "$4" --requests "$n" \
    --duration 240 --prompt-tokens "$3" --max-tokens $OUTPUT_TOKENS --label "$1" \
    --json "$L/$1_$3_$4.json" > "$L/$1_$3_$4.txt" 2>&1
  say "$1 prompt $3 clients $4 requests $n rc=$?: $(grep -E 'output tokens/s|TTFT' "$L/$1_$3_$4.txt" | tr '\n' ' ' | tr -s ' ' | cut -c1-300)"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$L/gpu.txt"
for eng in $ENGINES; do
  if [ "$eng" = perfx ]; then
    port=18741
    "$B/perfx" serve -m "${PERFX_MODEL:-random:llama-2-7b}" --device cuda --port $port --max-batch 256 \
      -c 1024 ${SERVE_ARGS:-} > "$L/perfx_serve.log" 2>&1 &
    pid=$!
    if ! wait_up $port $pid 180; then say "perfx serve did not come up: $(tail -3 "$L/perfx_serve.log")"; stop $pid; continue; fi
    say "perfx serve up"
    for cfg in $CONFIGS; do
      [ "$(elapsed)" -lt "$BUDGET" ] || { say "budget: perfx $cfg skipped"; continue; }
      load perfx $port "${cfg%%:*}" "${cfg##*:}"
    done
    stop $pid
  else
    mkdir -p /tmp/llamasrv && tar -xJf .devpack/llama-server.tar.xz -C /tmp/llamasrv
    LS=$(find /tmp/llamasrv -name llama-server -type f | head -1)
    G=/tmp/svl-llama-2-7b-q4_0.gguf
    if [ ! -f $G ]; then
      t=$(date +%s)
      timeout 240 python3 bench/compare/gen_random_gguf.py --shape llama-2-7b --type q4_0 \
        --vocab .devpack/ggml-vocab-llama-spm.gguf -o $G > "$L/gguf.log" 2>&1 || { say "GGUF failed: $(tail -3 "$L/gguf.log")"; continue; }
      say "GGUF written in $(($(date +%s) - t)) s ($(du -h $G | cut -f1))"
    fi
    "$LS" --version > "$L/llama_version.txt" 2>&1
    for cfg in $CONFIGS; do
      [ "$(elapsed)" -lt "$BUDGET" ] || { say "budget: llama $cfg skipped"; continue; }
      p=${cfg%%:*} c=${cfg##*:}
      port=18742
      # one slot per client with room for the prompt + output (+ slack for the tokenizer's count)
      "$LS" -m $G --host 127.0.0.1 --port $port -ngl 99 -fa -np "$c" -c $((c * (p + OUTPUT_TOKENS + 64))) \
        --cont-batching --no-webui ${LLAMA_ARGS:-} > "$L/llama_server_${p}_${c}.log" 2>&1 &
      pid=$!
      if ! wait_up $port $pid 180; then say "llama-server did not come up: $(tail -3 "$L/llama_server_${p}_${c}.log")"; stop $pid; continue; fi
      load llama $port "$p" "$c"
      stop $pid
    done
  fi
done

python3 - "$L" "$CONFIGS" << 'EOF' | tee -a "$L/summary.txt"
import json, os, sys
d, configs = sys.argv[1], sys.argv[2].split()
def get(e, p, c):
    f = os.path.join(d, f"{e}_{p}_{c}.json")
    return json.load(open(f)) if os.path.exists(f) else None
print("| prompt / output | clients | engine | output tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | completed | perfx / llama |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for cfg in configs:
    p, c = cfg.split(":")
    rs = {e: get(e, p, c) for e in ("perfx", "llama")}
    for e, r in rs.items():
        if not r:
            continue
        ratio = ""
        if e == "perfx" and rs["llama"] and rs["llama"]["output_tokens_per_s"]:
            ratio = f"{r['output_tokens_per_s'] / rs['llama']['output_tokens_per_s']:.2f}x"
        print(f"| {p} / 128 | {c} | {'perfx AWQ' if e == 'perfx' else 'llama-server Q4_0'} | "
              f"{r['output_tokens_per_s']:.0f} | {r['ttft_p50_s']*1e3:.0f} / {r['ttft_p99_s']*1e3:.0f} | "
              f"{r['tpot_p50_s']*1e3:.2f} / {r['tpot_p99_s']*1e3:.2f} | {r['completed']}/{r['completed']+r['failed']} | {ratio} |")
EOF
tar -czf "$OUT/svl.tar.gz" -C /tmp svl 2> /dev/null
echo "total $(elapsed) s"
