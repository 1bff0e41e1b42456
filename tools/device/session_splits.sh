#!/usr/bin/env bash
# Split-KV decode attention: the cost model's split count against forced ones
# (PERFX_CUDA_ATTN_SPLITS), batch-1 decode on the Llama-2-7B (32 KV heads) and TinyLlama-1.1B
# (4 KV heads, GQA 8) shapes, AWQ: tg128 (at most 2 tiles of 64 keys, so splits 1 / 2) and tg512
# (up to 8 tiles). docs/cuda_attention_notes.md has the table.
#   run: command "bash tools/device/session_splits.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
run() {  # model n splits
  [ $(( $(date +%s) - T0 )) -gt ${BUDGET:-480} ] && return
  local force=
  [ "$3" != model ] && force=$3
  env ${force:+PERFX_CUDA_ATTN_SPLITS=$force} timeout 120 "$B/perfx" bench -m random:$1 --device cuda -p 0 -n $2 -r 3 \
    > "$OUT/bench_$1_$2_$3.md" 2>&1
  echo "$1 tg$2 splits $3: $(grep "tg$2" "$OUT/bench_$1_$2_$3.md" | awk -F'|' '{print $(NF-1)}')"
}
for m in tinyllama-1.1b llama-2-7b; do
  for s in model 1 2 model; do run $m 128 $s; done
  for s in model 2 4 8 model; do run $m 512 $s; done
done
echo "total $(( $(date +%s) - T0 )) s"
