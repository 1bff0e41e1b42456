#!/usr/bin/env bash
# Twenty-seventh session, call 3: the CUDA suite on the binary of f5617bd (Backend::check_kv moved
# the CUDA create_kv's checks), then a bound for the next decode lever — RoPE and the KV store in
# the QKV projection's epilogue, off attention's critical path (not built). Timing-only arms
# (PERFX_CUDA_SKIP leaves ops out; the output is wrong while set), tg128, interleaved, two rounds:
#   fused    the default: RoPE + KV store inside the split-KV attention kernel
#   unfused  PERFX_CUDA_ROPE_FUSED=0: a rope_kv_store kernel, then attention
#   norope   unfused with the rope_kv_store kernel skipped: attention alone, nothing rotated or
#            stored — what attention costs if the projection had done RoPE and the store for free
#   noattn   PERFX_CUDA_SKIP=attn,rope: neither (attention's whole share)
#   run: command "bash tools/device/session_ropebound27.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-480}
cuda_suite "$OUT"
for round in 1 2; do
  for m in tinyllama-1.1b llama-2-7b; do
    bench_arm "$m fused r$round" "" $m tg128 -p 0 -n 128 -r 3
    bench_arm "$m unfused r$round" "PERFX_CUDA_ROPE_FUSED=0" $m tg128 -p 0 -n 128 -r 3
    bench_arm "$m norope r$round" "PERFX_CUDA_ROPE_FUSED=0 PERFX_CUDA_SKIP=rope" $m tg128 -p 0 -n 128 -r 3
    bench_arm "$m noattn r$round" "PERFX_CUDA_SKIP=attn,rope" $m tg128 -p 0 -n 128 -r 3
  done
done
echo "total $(( $(date +%s) - T0 )) s"
