#!/usr/bin/env bash
# Twenty-sixth session, call 4 (the last of the session's device time): call 3
# (session_splits26.sh) measured two attention splits at tg128's 65–128 keys +0.85 % on 7B batch 1
# and −4.5 % on TinyLlama. This times 7B batch 8 (256 pairs) at two splits, forced, against the
# model's one. (It never ran: the twenty-seventh session's session_rows27.sh measured the rule
# instead. The per-row charge would not have picked two splits here after all: 512 CTAs need a
# second round of the 396 slots, where it costs 2 x (1 + 1) + 1/8 against 1 x (2 + 1).)
#   run: command "bash tools/device/session_splits26b.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
for s in 0 2 0 2; do split_arm "7B batch 8 (tg128 x 8)" $s 0 llama-2-7b "tg128 x8" -p 0 -n 128 -B 8 -r 2; done
echo "total $(( $(date +%s) - T0 )) s"
