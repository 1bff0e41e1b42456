#!/usr/bin/env bash
# Twenty-sixth session, call 3. Call 2's trace (session_norm25b.sh) showed the fused down → norm →
# QKV pair (PERFX_CUDA_NORM_FUSE=1) shortening the QKV's critical share by ~0.9 µs a TinyLlama
# layer while attention, whose 4 CTAs start at a time pinned by the down projection's exit, waited
# longer after its PDL wait (+0.6–0.8 µs). Attention's split count sets its prologue and the first
# tile's wait (cuda_attention_notes.md "After the wait": 2 splits cut 7B's by three quarters);
# TinyLlama's 2 splits measured −5 % in the eleventh session, before the bulk and tensor-map
# copies. Untraced tg128 (-r 3), arms interleaved, three rounds: splits (model / 2) × fuse (0 / 1);
# at tg128 (up to 128 keys, two 64-key tiles) the model picks 1 split, 2 is the only other choice.
# (Refactored after the run into devbin.sh's split_arm helper; the runs and their order are unchanged.)
#   run: command "bash tools/device/session_splits26.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-300}
for round in 1 2 3; do
  for s in 0 2; do
    for f in 0 1; do
      split_arm "tiny fuse=$f round $round" $s $f tinyllama-1.1b tg128 -p 0 -n 128 -r 3
    done
  done
done
for s in 0 2; do split_arm "tiny tg512" $s 0 tinyllama-1.1b tg512 -p 0 -n 512 -r 2; done
for s in 0 2 0 2; do split_arm "tiny batch 8 (tg32 x 8)" $s 0 tinyllama-1.1b "tg32 x8" -p 0 -n 32 -B 8 -r 2; done
for s in 0 2 0 2; do split_arm "7B tg128" $s 0 llama-2-7b tg128 -p 0 -n 128 -r 3; done
echo "total $(( $(date +%s) - T0 )) s"
