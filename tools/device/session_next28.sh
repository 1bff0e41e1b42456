#!/usr/bin/env bash
# Ready for the next device session (written in the twenty-seventh, which had no device left; the
# rest added in the twenty-eighth, which had none lent). First the attention-fusion probe
# (bench/cuda/attn_fuse_probe.cu, built with the device's nvcc; its predictions are in
# docs/cuda_attention_notes.md "Attention inside the QKV kernel: a probe first"), then the CUDA
# suite on the packed binary (.devpack/PACKED_FROM names its commit; not yet run on a GPU:
# b949c29's host-side KV-cache refusals and the lm_head type tests), the Q8_0 and Q4_0 lm_heads
# against the fp16 one (the default: the issue's tg128 figures; two interleaved rounds; docs/CUDA.md
# has the predictions), then the per-row merge charge's one unmeasured side: Llama-2-7B batch 8
# tg128 with two splits forced (512 CTAs, two rounds of 396 slots) against the model's one — if
# two win there, the one-round restriction (attn_plan.h merge_charge) is too strict.
#   run: command "bash tools/device/session_next28.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-540}
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -o /tmp/afprobe \
  bench/cuda/attn_fuse_probe.cu && for args in "9 16 128" "9 24 128" "9 16 512"; do
  timeout 90 /tmp/afprobe $args | tee "$OUT/afprobe_${args// /_}.txt"
done
echo "probe $(( $(date +%s) - T0 )) s"
cuda_suite "$OUT"
for r in 1 2; do lm_head_arms q8_0 q4_0 fp16; done
for s in 0 2; do split_arm "7B batch 8" $s 0 llama-2-7b "tg128 x8" -p 0 -n 128 -B 8 -r 2; done
echo "total $(( $(date +%s) - T0 )) s"
