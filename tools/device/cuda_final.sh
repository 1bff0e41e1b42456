#!/usr/bin/env bash
# A short closing GPU call: host peak RSS with a real 7B file on the GPU (a Llama-2-7B-shape Q4_0
# GGUF written here by bench/compare/gen_random_gguf.py), the model tests on cuda:0, and
# `perfx serve --device cuda` under the load generator at 1/16/64/256 concurrent clients
# (prompt 128 / output 128, random:llama-2-7b AWQ). Carry [".devpack", ".devshared", ".devllama2"].
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
S=$OUT/final.txt
: > "$S"
note() { echo "$*" | tee -a "$S"; }

python3 bench/compare/gen_random_gguf.py --shape llama-2-7b --type q4_0 --vocab .devllama2/ggml-vocab-llama-spm.gguf \
  -o /tmp/7b-q4_0.gguf > /tmp/gen.log 2>&1
note "gguf: $(tail -1 /tmp/gen.log)"
/usr/bin/time -v "$B/perfx" run -m /tmp/7b-q4_0.gguf --device cuda -p "Once upon a time" -n 32 --temp 0 \
  > /tmp/run.out 2> /tmp/run.err
note "run 7B Q4_0 GGUF on cuda rc=$?: $(grep -E 'Maximum resident' /tmp/run.err | sed 's/^\s*//'); $(grep -m1 'generated' /tmp/run.err | cut -c1-160)"
"$B/perfx" bench -m /tmp/7b-q4_0.gguf --device cuda -p 512 -n 128 -r 3 > /tmp/bench_gguf.md 2> /tmp/bench_gguf.err
note "bench 7B Q4_0 GGUF rc=$?: $(grep -E '\| (pp|tg)' /tmp/bench_gguf.md | awk -F'|' '{printf "%s %s;", $7, $8}') $(grep -m1 peak /tmp/bench_gguf.err)"

PERFX_TEST_DEVICE=cuda:0 timeout 150 "$B/tests/test_model" --gtest_filter='*cuda*' > /tmp/model.log 2>&1
note "model tests cuda f16 rc=$?: $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]' /tmp/model.log | tr '\n' ' ')"
grep -E "greedy:|Failure" /tmp/model.log | head -6 | tee -a "$S"

port=18731
"$B/perfx" serve -m random:llama-2-7b --device cuda --port $port --max-batch 256 > /tmp/serve.log 2>&1 &
pid=$!
for i in $(seq 1 120); do curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 1; done
note "serve up after $(( $(date +%s) - T0 )) s (since the call began)"
for c in 1 16 64 256; do
  n=$(( c < 4 ? 8 : c * 2 ))
  timeout 120 "$B/perfx" bench-serve --url "http://127.0.0.1:$port" --clients $c --requests $n --duration 60 \
    --prompt-tokens 128 --max-tokens 128 --json /tmp/serve_$c.json > /tmp/serve_$c.txt 2>&1
  note "serve c=$c rc=$?: $(tr '\n' ' ' < /tmp/serve_$c.txt | tr -s ' ' | cut -c1-600)"
done
curl -fsS "http://127.0.0.1:$port/metrics" | grep -E "^perfx_(kv_blocks_used|engine_steps_total|engine_step_tokens_total|requests_total)" | tee -a "$S"
kill $pid 2> /dev/null
wait $pid 2> /dev/null
cp /tmp/serve_*.json /tmp/bench_gguf.md "$OUT/" 2> /dev/null
note "total $(( $(date +%s) - T0 )) s"
