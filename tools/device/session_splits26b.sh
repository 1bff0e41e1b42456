#!/usr/bin/env bash
# Twenty-sixth session, call 4 (the last of the session's device time): call 3
# (session_splits26.sh) measured two attention splits at tg128's 65–128 keys +0.85 % on 7B batch 1
# and −4.5 % on TinyLlama. A per-row merge charge in choose_splits would also give 7B batch 8
# (256 pairs) two splits there; this times that case, forced, against the model's one split.
#   run: command "bash tools/device/session_splits26b.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for s in 0 2 0 2; do split_arm "7B batch 8 (tg128 x 8)" $s 0 llama-2-7b tg128 -p 0 -n 128 -B 8 -r 2; done
echo "total $(( $(date +%s) - T0 )) s"
