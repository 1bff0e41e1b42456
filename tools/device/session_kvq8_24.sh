#!/usr/bin/env bash
# Twenty-fourth session, call 6: is decode attention now bound by its K/V bytes? The q8_0 KV cache
# (--kv-cache-dtype q8_0: int8 rows + fp16 scales, ~0.53x the bytes; staged with cp.async, not
# bulk copies) against the default fp16 cache, 7B tg128 and tg512, TinyLlama tg128, interleaved.
#   run: command "bash tools/device/session_kvq8_24.sh", carry [".devpack", ".devshared"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-200}
one() {  # one MODEL N DTYPE ROUND
  over_budget && { echo "$1 tg$2 $3: skipped (budget)"; return; }
  local f="$OUT/tg_$1_$2_$3_r$4.md"
  timeout 90 "$B/perfx" bench -m "random:$1" --device cuda -p 0 -n "$2" -r 3 --kv-cache-dtype "$3" \
    > "$f" 2>&1
  echo "$1 tg$2 kv=$3 round $4: $(grep -E "\| *tg$2" "$f" | awk -F'|' '{print $(NF-1)}')"
}
for r in 1 2; do
  for d in auto q8_0; do one llama-2-7b 128 $d $r; done
done
for d in auto q8_0; do one llama-2-7b 512 $d 1; done
for d in auto q8_0; do one tinyllama-1.1b 128 $d 1; done
echo "total $(( $(date +%s) - T0 )) s"
