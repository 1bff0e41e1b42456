#!/usr/bin/env bash
# Twenty-second session, call 2: the persistent-decode probe (bench/cuda/persistent_probe.cu,
# docs/cuda_linear_notes.md §28), built with the device's nvcc: streaming a 7B / TinyLlama
# layer's W4 bytes as today's PDL chain vs one cooperative kernel with grid barriers, with and
# without deeper staging in shared memory, with and without an attention-like latency phase.
# Then the engine's own GEMV-only chain (PERFX_CUDA_SKIP=norm,rope,attn: wrong output, timing
# only) beside the default, for the probe's "chain: gemv only" row to be read against; and the
# attention kernel bench (its fp16 cache case was broken; fixed this session).
#   run: command "bash tools/device/session_probe22.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-420}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -o /tmp/pprobe \
  bench/cuda/persistent_probe.cu || exit 1
for chain in 24 64; do
  timeout 120 /tmp/pprobe 9 $chain | tee "$OUT/pprobe_$chain.txt"
done
echo "probe $(( $(date +%s) - T0 )) s"
MODELS="llama-2-7b tinyllama-1.1b" ROUNDS=2 ab_tg PERFX_CUDA_SKIP "norm,rope,attn"
tg_line "default" "$B/perfx" random:llama-2-7b
tg_line "default" "$B/perfx" random:tinyllama-1.1b
if [ -f .devpack/kt.tar.xz ]; then
  tar -xJf .devpack/kt.tar.xz -C /tmp
  timeout 120 /tmp/kt/attention_kernels_test --bench > "$OUT/attn_bench.txt" 2>&1
  echo "attention bench rc=$?"; grep -E '^BENCH (decode 7B|decode TinyL|prefill)' "$OUT/attn_bench.txt" | head -12
fi
echo "total $(( $(date +%s) - T0 )) s"
