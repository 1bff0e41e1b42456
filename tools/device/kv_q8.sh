#!/usr/bin/env bash
# The q8_0 KV cache on CUDA (issue 10's --kv-cache-dtype): quality and speed in one GPU call.
#  1. perplexity of models/default on heldout.txt: CPU f32 and q8_0 caches, CUDA f16 and q8_0;
#  2. the attention kernels' per-call time, fp16 vs q8_0 cache (conformance --perf, TinyLlama
#     decode shape at context 1024, 8 sequences);
#  3. the attention kernel tests (tests/cuda, q8 cases included) and their decode benchmark at
#     serving batches, fp16 vs q8_0 cache;
#  4. serving 256 clients (prompt 128 / output 128) on random:llama-2-7b with each cache type, and
#     the KV capacity each gets from --gpu-memory-utilization 0.9.
#   run: command "bash tools/device/kv_q8.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
H=models/default/heldout.txt
for dev in cpu cuda; do
  for t in auto q8_0; do
    r=$(timeout 120 "$B/perfx" perplexity -m models/default -f $H --device $dev --kv-cache-dtype $t 2> "$OUT/ppl_${dev}_$t.err" | tail -1)
    echo "perplexity $dev cache $t: $r ($(grep -o 'ctx [0-9]*' "$OUT/ppl_${dev}_$t.err" | head -1))"
  done
done
if [ -x "$B/attn/attention_kernels_test" ]; then
  timeout 200 "$B/attn/attention_kernels_test" > "$OUT/attn_kernels.log" 2>&1
  echo "attention kernel tests rc=$?: $(grep -c '^\[PASS' "$OUT/attn_kernels.log") pass, $(grep -c '^\[FAIL' "$OUT/attn_kernels.log") fail"
  grep '^\[FAIL' "$OUT/attn_kernels.log" | head -3 | cut -c1-250
  timeout 120 "$B/attn/attention_kernels_test" --bench > "$OUT/attn_bench.log" 2>&1
  grep -E "^BENCH decode (7B|L3-8B)" "$OUT/attn_bench.log" | grep -E "b=(64|256)" | cut -c1-110
fi
PERFX_TEST_DEVICE=cuda:0 timeout 120 "$B/tests/test_conformance" --perf --gtest_filter='*AttentionPerf*cuda*' > "$OUT/attn_perf.log" 2>&1
echo "attention perf rc=$?:"; grep -iE "attention.*(us|ms)" "$OUT/attn_perf.log" | head -8
for t in auto q8_0; do
  timeout 60 "$B/perfx" serve -m random:llama-2-7b --device cuda --port 18751 --max-batch 256 --kv-cache-dtype $t > "$OUT/kvcap_$t.log" 2>&1 &
  p=$!
  for i in $(seq 1 60); do curl -fsS http://127.0.0.1:18751/health > /dev/null 2>&1 && break; sleep 1; done
  echo "serve cache $t: $(grep -iE 'kv cache|KV' "$OUT/kvcap_$t.log" | head -2 | tr '\n' ' ')"
  kill $p; wait $p 2> /dev/null
done
for t in auto q8_0; do
  CLIENTS="256" SERVE_ARGS="--kv-cache-dtype $t" OUT=/tmp/sweep_$t bash tools/device/serve_sweep.sh 2>&1 | grep "serve c=" | sed "s/^/cache $t: /"
done
echo "total $(( $(date +%s) - T0 )) s"
