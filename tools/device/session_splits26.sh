#!/usr/bin/env bash
# Twenty-sixth session, call 3. Call 2's trace (session_norm25b.sh) showed the fused down → norm →
# QKV pair (PERFX_CUDA_NORM_FUSE=1) shortening the QKV's critical share by ~0.9 µs a TinyLlama
# layer while attention, whose 4 CTAs start at a time pinned by the down projection's exit, waited
# longer after its PDL wait (+0.6–0.8 µs). Attention's split count sets its prologue and the first
# tile's wait (cuda_attention_notes.md "After the wait": 2 splits cut 7B's by three quarters);
# TinyLlama's 2 splits measured −5 % in the eleventh session, before the bulk and tensor-map
# copies. Untraced tg128 (-r 3), arms interleaved, three rounds: splits (model / 2) × fuse (0 / 1);
# at tg128 (up to 128 keys, two 64-key tiles) the model picks 1 split, 2 is the only other choice.
#   run: command "bash tools/device/session_splits26.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
for round in 1 2 3; do
  for s in 0 2; do
    for f in 0 1; do
      over_budget && { echo "skipped (budget)"; continue; }
      envs="PERFX_CUDA_NORM_FUSE=$f"
      [ "$s" != 0 ] && envs="$envs PERFX_CUDA_ATTN_SPLITS=$s"
      env $envs timeout 60 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 -n 128 \
        -r 3 > /tmp/b.md 2>&1; cat /tmp/b.md >> "$OUT/benches.md"
      echo "tiny splits=${s/#0/model} fuse=$f round $round: $(grep tg128 /tmp/b.md | awk -F'|' '{print $(NF-1)}')"
    done
  done
done
for s in 0 2; do
  over_budget && { echo "skipped (budget)"; continue; }
  envs="PERFX_CUDA_NORM_FUSE=0"; [ "$s" != 0 ] && envs="$envs PERFX_CUDA_ATTN_SPLITS=$s"
  env $envs timeout 60 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 -n 512 \
    -r 2 > /tmp/b.md 2>&1; cat /tmp/b.md >> "$OUT/benches.md"
  echo "tiny tg512 splits=${s/#0/model}: $(grep tg512 /tmp/b.md | awk -F'|' '{print $(NF-1)}')"
done
for s in 0 2 0 2; do
  over_budget && { echo "skipped (budget)"; continue; }
  envs="PERFX_CUDA_NORM_FUSE=0"; [ "$s" != 0 ] && envs="$envs PERFX_CUDA_ATTN_SPLITS=$s"
  env $envs timeout 60 "$B/perfx" bench -m random:tinyllama-1.1b --device cuda -p 0 -n 32 -B 8 \
    -r 2 > /tmp/b.md 2>&1; cat /tmp/b.md >> "$OUT/benches.md"
  echo "tiny batch 8 (tg32 x 8) splits=${s/#0/model}: $(grep tg32 /tmp/b.md | awk -F'|' '{print $(NF-1)}')"
done
for s in 0 2 0 2; do
  over_budget && { echo "skipped (budget)"; continue; }
  envs="PERFX_CUDA_NORM_FUSE=0"; [ "$s" != 0 ] && envs="$envs PERFX_CUDA_ATTN_SPLITS=$s"
  env $envs timeout 60 "$B/perfx" bench -m random:llama-2-7b --device cuda -p 0 -n 128 \
    -r 3 > /tmp/b.md 2>&1; cat /tmp/b.md >> "$OUT/benches.md"
  echo "7B tg128 splits=${s/#0/model}: $(grep tg128 /tmp/b.md | awk -F'|' '{print $(NF-1)}')"
done
echo "total $(( $(date +%s) - T0 )) s"
