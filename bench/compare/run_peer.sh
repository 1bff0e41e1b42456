#!/usr/bin/env bash
# perfx vs llama.cpp on the same models, same threads, same prompt length / generated tokens.
#
# Runs an ALREADY BUILT llama.cpp (this script never fetches or builds it) and our perfx binary, and prints a
# Markdown report (prefill / decode tokens/s, wall clock, peak RSS, ratios, decode roofline vs measured memory
# bandwidth). See docs/PERFORMANCE.md for results and bench/compare/run_peer.py for the method.
#
# usage: bench/compare/run_peer.sh LLAMA_CPP_BIN MODEL_GGUF [MODEL_DIR] [-- extra run_peer.py args]
#   LLAMA_CPP_BIN  folder holding llama-bench, llama-completion, llama-tokenize
#   MODEL_GGUF     GGUF of our model (e.g. from bench/compare/hf_to_gguf.py); an f16 sibling named
#                  *-f16.gguf next to a *-f32.gguf is added as a second case automatically
#   MODEL_DIR      our HF checkpoint folder (default: models/default); perfx runs it against MODEL_GGUF
# environment:
#   PERFX_BIN      perfx binary (default: build-peer/perfx in the repo)
#   PERFX_SRC      source tree PERFX_BIN was built from, for the commit in the report (a git checkout, or a
#                  `git archive` export holding a COMMIT file; default: this repo)
#   STORIES_GGUF   second model, loaded by both engines (default: $PERFX_SHARED_DIR/models/stories260K/stories260K.gguf,
#                  PERFX_SHARED_DIR defaulting to ../shared next to the repo); set to "" to skip
#   THREADS NP NG REPS   (default 2 128 64 3)
#   SCHED                normal (default) or fifo: timed commands under `chrt -f 10` (root / CAP_SYS_NICE), for
#                        a shared machine whose other processes would otherwise preempt the benchmark
#   LLAMA_CPP_COMMIT     recorded in the report (default: contents of LLAMA_CPP_BIN/../../COMMIT if present)
#   JSON_OUT             also write raw numbers as JSON here
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [[ $# -lt 2 ]]; then
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
  exit 2
fi
llama_bin="$(cd "$1" && pwd)"
gguf="$2"
model_dir="${3:-$repo/models/default}"
shift $(( $# >= 3 ? 3 : 2 ))
[[ "${1:-}" == "--" ]] && shift

shared="$(realpath -m "${PERFX_SHARED_DIR:-$repo/../shared}")"
stories="${STORIES_GGUF-$shared/models/stories260K/stories260K.gguf}"
perfx="${PERFX_BIN:-$repo/build-peer/perfx}"
commit="${LLAMA_CPP_COMMIT:-}"
if [[ -z "$commit" && -f "$llama_bin/../../COMMIT" ]]; then commit="$(cat "$llama_bin/../../COMMIT")"; fi

work="$(mktemp -d "${TMPDIR:-/tmp}/run_peer.XXXXXX")"
trap 'rm -rf "$work"' EXIT
g++ -O2 -march=native -pthread -o "$work/membw" "$here/membw.cpp"

if [[ "$gguf" == *-f32.gguf ]]; then
  cases=(--case "default f32 GGUF (both)=$gguf,$gguf")
  f16="${gguf/-f32.gguf/-f16.gguf}"
  [[ -f "$f16" ]] && cases+=(--case "default: perfx bf16 HF folder vs llama.cpp f16 GGUF=$model_dir,$f16")
else
  cases=(--case "default: perfx HF folder vs llama.cpp GGUF=$model_dir,$gguf")
fi
if [[ -n "$stories" && -f "$stories" ]]; then
  cases+=(--case "stories260K GGUF (both)=$stories,$stories")
fi

python3 "$here/run_peer.py" --llama-bin "$llama_bin" --perfx "$perfx" --membw "$work/membw" \
  --threads "${THREADS:-2}" --np "${NP:-128}" --ng "${NG:-64}" --reps "${REPS:-3}" --sched "${SCHED:-normal}" \
  --llama-commit "$commit" --perfx-src "${PERFX_SRC:-$repo}" ${JSON_OUT:+--json "$JSON_OUT"} "${cases[@]}" "$@"
