#!/usr/bin/env bash
# Where batch-1 decode time goes inside the captured step: tg128 on the Llama-2-7B and
# TinyLlama-1.1B shapes (AWQ) with each op family left out (PERFX_CUDA_SKIP, timing only: the
# output is wrong). Step time minus the step time without an op = what that op costs in the chain
# (launch, PDL wait and the kernel), docs/cuda_linear_notes.md §12.
#   run: command "bash tools/device/session_ablate.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for m in llama-2-7b tinyllama-1.1b; do
  for sk in none norm rope attn rope,attn linear none; do
    [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-480} ] && continue
    if [ "$sk" = none ]; then skip=; else skip=$sk; fi
    env ${skip:+PERFX_CUDA_SKIP=$skip} timeout 90 "$B/perfx" bench -m random:$m --device cuda -p 0 -n 128 -r 3 \
      > "$OUT/bench_${m}_${sk/,/_}.md" 2>&1
    echo "$m skip $sk: $(grep tg128 "$OUT/bench_${m}_${sk/,/_}.md" | awk -F'|' '{print $(NF-1)}')"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
