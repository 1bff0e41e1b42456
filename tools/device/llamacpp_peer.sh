#!/usr/bin/env bash
# perfx vs llama.cpp CUDA on the same GPU, back to back, same shapes (issue 9): random weights in the exact
# TinyLlama-1.1B and Llama-2-7B shapes, "the same Q4_0 GGUF in both engines".
#
# One GPU-machine call, run from the repo root, carrying .devpack:
#   .devpack/llama.tar.xz              llama-bench (llama.cpp CUDA, sm_90, static ggml; built on the dev machine)
#   .devpack/bin.tar.xz                perfx (CUDA) from tools/device/pack_cuda_bins.sh (or PERFX=path)
#   .devpack/ggml-vocab-llama-spm.gguf tokenizer.ggml.* keys for the GGUFs (or VOCAB=path)
#   run: command "bash tools/device/llamacpp_peer.sh", carry [".devpack"]
#
# Steps (each prints its wall time):
#   1. bench/compare/gen_random_gguf.py writes /tmp/peer_gguf/{tinyllama-1.1b,llama-2-7b}-q4_0.gguf (every 2-D
#      weight Q4_0, output.weight too) and llama-2-7b-f16.gguf;
#   2. per model: llama-bench -fa 1 -ngl 99 -p 512 -n 128 -r 3 on the GGUF, then perfx bench --device cuda on the
#      same GGUF, then perfx on its own random:SHAPE (AWQ W4 g128) / random:llama-2-7b:f16;
#   3. a table: llama.cpp vs perfx pp512 / tg128 and perfx/llama.cpp ratios.
# .devpack/llama.tar.xz was built on the dev machine (never in this repo) from llama.cpp 34af94cd:
#   cmake -S . -B build-cuda90 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#     -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_NCCL=OFF
#     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF
#   cmake --build build-cuda90 --target llama-bench; strip; tar -cJf llama.tar.xz llama/{llama-bench,BUILD_INFO}
# (needs libcudart.so.13 / libcublas.so.13 from /usr/local/cuda/lib64 and the driver's libcuda.so.1).
# Environment:
#   STEPS="tiny 7b f16" (default all)  REPS=3  NP=512  NG=128  BUDGET=210 (s; later steps are skipped past it)
#   LLAMA_BENCH=path  PERFX=path  VOCAB=path  GGUF_DIR=/tmp/peer_gguf  KEEP=1 (keep the GGUFs)
#   DEVICE=cuda  NGL=99  LAYERS=N (GGUFs with N layers only: a quick test on a CPU machine, with DEVICE=cpu NGL=0)
# Logs go to $OUT/llamacpp_peer/ when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
T0=$(date +%s)
STEPS=${STEPS:-"tiny 7b f16"}
REPS=${REPS:-3}
NP=${NP:-512}
NG=${NG:-128}
BUDGET=${BUDGET:-210}
DEVICE=${DEVICE:-cuda}
NGL=${NGL:-99}
G=${GGUF_DIR:-/tmp/peer_gguf}
L=/tmp/llamacpp_peer_logs
rm -rf "$L" && mkdir -p "$L" "$G"
export LD_LIBRARY_PATH="$ROOT/.devpack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
SUM=$L/summary.txt
FAIL=0
RES=$L/results.tsv  # key engine file
: > "$SUM"
: > "$RES"
note() { echo "$*" | tee -a "$SUM"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
elapsed() { echo $(( $(date +%s) - T0 )); }

finish() {
  python3 - "$RES" "$NP" "$NG" <<'EOF' >> "$SUM"
import sys
res, np_, ng = sys.argv[1], sys.argv[2], sys.argv[3]

def parse(path):
    """pp / tg tokens/s from a llama-bench-style Markdown table (columns found by header name)."""
    out = {}
    try:
        lines = [l.strip() for l in open(path) if l.strip().startswith("|")]
    except OSError:
        return out
    if not lines:
        return out
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    if "test" not in head or "t/s" not in head:
        return out
    it, iv = head.index("test"), head.index("t/s")
    for l in lines[2:]:
        c = [x.strip() for x in l.strip("|").split("|")]
        if len(c) <= max(it, iv):
            continue
        try:
            out[c[it]] = float(c[iv].split()[0])
        except ValueError:
            pass
    return out

runs = {}
for line in open(res):
    key, eng, path = line.rstrip("\n").split("\t")
    runs[(key, eng)] = parse(path)
rows = [("tiny", "TinyLlama-1.1B", "Q4_0 GGUF", "tiny_q4", "tiny_q4"),
        ("tiny", "TinyLlama-1.1B", "perfx AWQ vs llama.cpp Q4_0", "tiny_q4", "tiny_awq"),
        ("7b", "Llama-2-7B", "Q4_0 GGUF", "7b_q4", "7b_q4"),
        ("7b", "Llama-2-7B", "perfx AWQ vs llama.cpp Q4_0", "7b_q4", "7b_awq"),
        ("f16", "Llama-2-7B", "F16 (llama.cpp GGUF, perfx random:f16)", "7b_f16", "7b_f16")]
pp, tg = "pp" + np_, "tg" + ng
fmt = lambda v: "%.1f" % v if v is not None else "-"
ratio = lambda a, b: "%.2fx" % (b / a) if a and b else "-"
print()
print("| model | weights | llama.cpp %s | perfx %s | ratio | llama.cpp %s | perfx %s | ratio |" % (pp, pp, tg, tg))
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for _, model, what, lk, pk in rows:
    l, p = runs.get((lk, "llama.cpp")), runs.get((pk, "perfx"))
    if l is None and p is None:
        continue
    l, p = l or {}, p or {}
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (model, what, fmt(l.get(pp)), fmt(p.get(pp)),
          ratio(l.get(pp), p.get(pp)), fmt(l.get(tg)), fmt(p.get(tg)), ratio(l.get(tg), p.get(tg))))
print("(ratio = perfx / llama.cpp; issue 9 quotes llama.cpp 34af94cd: 7B Q4_0 tg 361 pp 11344, "
      "F16 tg 223 pp 17455, TinyLlama Q4_0 tg 864 pp 40043)")
EOF
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/llamacpp_peer" && cp "$L"/* "$OUT/llamacpp_peer/" 2> /dev/null; fi
  [ "${KEEP:-0}" = 1 ] || rm -f "$G"/*.gguf
  echo "==================== SUMMARY ($(elapsed) s)"
  cat "$SUM"
  exit $FAIL
}
trap finish EXIT

# ---- binaries
t=$(date +%s)
LB=${LLAMA_BENCH:-}
if [ -z "$LB" ]; then
  LT="$ROOT/.devpack/llama.tar.xz"
  # Over the carry limit in one call: part 1 staged in /tmp by an earlier call on the same machine,
  # part 2 carried now (.devllama2).
  if [ ! -f "$LT" ] && [ -f /tmp/llama.tar.xz.part1 ] && [ -f "$ROOT/.devllama2/llama.tar.xz.part2" ]; then
    cat /tmp/llama.tar.xz.part1 "$ROOT/.devllama2/llama.tar.xz.part2" > /tmp/llama.tar.xz && LT=/tmp/llama.tar.xz
  fi
  [ -f "$LT" ] || { note "no llama.tar.xz (.devpack, or /tmp part 1 + .devllama2 part 2) and no LLAMA_BENCH=path"; FAIL=1; exit 1; }
  rm -rf /tmp/llamabin && mkdir -p /tmp/llamabin && tar -xJf "$LT" -C /tmp/llamabin
  LB=$(find /tmp/llamabin -name llama-bench -type f | head -1)
fi
PX=${PERFX:-}
if [ -z "$PX" ]; then
  if [ -x /tmp/devbin/.devbin/perfx ]; then
    PX=/tmp/devbin/.devbin/perfx
  elif [ -f "$ROOT/.devpack/bin.tar.xz" ]; then
    mkdir -p /tmp/devbin && tar -xJf "$ROOT/.devpack/bin.tar.xz" -C /tmp/devbin .devbin/perfx && PX=/tmp/devbin/.devbin/perfx
  fi
fi
VOCAB=${VOCAB:-}
for v in "$ROOT/.devpack/ggml-vocab-llama-spm.gguf" "$ROOT/.devllama2/ggml-vocab-llama-spm.gguf" "$ROOT/.devshared/tokenizers/llama2/ggml-vocab-llama-spm.gguf" \
  "$ROOT/../shared/tokenizers/llama2/ggml-vocab-llama-spm.gguf"; do
  [ -z "$VOCAB" ] && [ -f "$v" ] && VOCAB=$v
done
[ -n "$LB" ] && [ -x "$LB" ] || { note "llama-bench not found"; FAIL=1; exit 1; }
[ -n "$PX" ] && [ -x "$PX" ] || { note "perfx not found (PERFX=path or .devpack/bin.tar.xz)"; FAIL=1; exit 1; }
[ -n "$VOCAB" ] || { note "ggml-vocab-llama-spm.gguf not found (VOCAB=path or .devpack/)"; FAIL=1; exit 1; }
note "binaries ($(( $(date +%s) - t )) s): llama-bench=$LB perfx=$PX vocab=$VOCAB"
if ! "$LB" --help > /dev/null 2> "$L/llama_start.err"; then
  note "llama-bench does not start: $(head -3 "$L/llama_start.err")"
  ldd "$LB" | grep -i "not found" | sed 's/^/  /' | tee -a "$SUM"
  FAIL=1; exit 1
fi
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv,noheader 2>&1 | head -1 | sed 's/^/gpu: /' | tee -a "$SUM"

# ---- steps
budget_ok() {
  if [ "$(elapsed)" -gt "$BUDGET" ]; then note "SKIP $1: past the ${BUDGET} s budget"; return 1; fi
}
gen() {  # file, args...
  local f=$1
  shift
  local t=$(date +%s)
  timeout 120 python3 bench/compare/gen_random_gguf.py --vocab "$VOCAB" ${LAYERS:+--layers $LAYERS} -o "$f" "$@" \
    > "$L/gen_$(basename "$f").log" 2>&1
  local rc=$?
  note "gen $(basename "$f") rc=$rc ($(( $(date +%s) - t )) s): $(tail -1 "$L/gen_$(basename "$f").log")"
  [ $rc -ne 0 ] && FAIL=1
  return $rc
}
llama() {  # key, gguf
  local t=$(date +%s)
  timeout 100 "$LB" -m "$2" -ngl "$NGL" -fa 1 -p "$NP" -n "$NG" -r "$REPS" -o md > "$L/llama_$1.md" 2> "$L/llama_$1.err"
  local rc=$?
  printf '%s\tllama.cpp\t%s\n' "$1" "$L/llama_$1.md" >> "$RES"
  note "llama.cpp $1 rc=$rc ($(( $(date +%s) - t )) s): $(grep -E '\| +(pp|tg)[0-9]' "$L/llama_$1.md" |
    awk -F'|' '{gsub(/ +/," "); printf "%s%s;", $(NF-2), $(NF-1)}' | sed 's/^ //; s/ ;/;/g')"
  [ $rc -ne 0 ] && { FAIL=1; tail -3 "$L/llama_$1.err" | sed 's/^/  /' | tee -a "$SUM"; }
  return 0
}
perfx() {  # key, model
  local t=$(date +%s)
  timeout 100 "$PX" bench --device "$DEVICE" -m "$2" -p "$NP" -n "$NG" -r "$REPS" > "$L/perfx_$1.md" 2> "$L/perfx_$1.err"
  local rc=$?
  printf '%s\tperfx\t%s\n' "$1" "$L/perfx_$1.md" >> "$RES"
  note "perfx $1 rc=$rc ($(( $(date +%s) - t )) s): $(grep -E '\| +(pp|tg)[0-9]' "$L/perfx_$1.md" |
    awk -F'|' '{gsub(/ +/," "); printf "%s%s;", $(NF-2), $(NF-1)}' | sed 's/^ //; s/ ;/;/g') $(grep -o 'loaded .* in [0-9.]* s' "$L/perfx_$1.err" | head -1 | sed 's/.* in /load /')"
  [ $rc -ne 0 ] && { FAIL=1; tail -3 "$L/perfx_$1.err" | sed 's/^/  /' | tee -a "$SUM"; }
  return 0
}

if has tiny && budget_ok tiny; then
  f=$G/tinyllama-1.1b-q4_0.gguf
  if gen "$f" --shape tinyllama-1.1b --type q4_0; then
    llama tiny_q4 "$f"
    perfx tiny_q4 "$f"
  fi
  [ -z "${LAYERS:-}" ] && budget_ok tiny_awq && perfx tiny_awq random:tinyllama-1.1b
  [ "${KEEP:-0}" = 1 ] || rm -f "$f"
fi
if has 7b && budget_ok 7b; then
  f=$G/llama-2-7b-q4_0.gguf
  if gen "$f" --shape llama-2-7b --type q4_0; then
    llama 7b_q4 "$f"
    budget_ok 7b_q4_perfx && perfx 7b_q4 "$f"
  fi
  [ -z "${LAYERS:-}" ] && budget_ok 7b_awq && perfx 7b_awq random:llama-2-7b
  [ "${KEEP:-0}" = 1 ] || rm -f "$f"
fi
if has f16 && budget_ok f16; then
  f=$G/llama-2-7b-f16.gguf
  if gen "$f" --shape llama-2-7b --type f16; then
    llama 7b_f16 "$f"
  fi
  [ -n "${LAYERS:-}" ] && perfx 7b_f16 "$f"  # quick test: the same small file
  [ "${KEEP:-0}" = 1 ] || rm -f "$f"
  [ -z "${LAYERS:-}" ] && budget_ok 7b_f16_perfx && perfx 7b_f16 random:llama-2-7b:f16
fi
