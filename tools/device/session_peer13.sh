#!/usr/bin/env bash
# Thirteenth session, second call: (1) the symmetric-record w4_gemv3 with an 8-slot ring
# (.devpack/var.tar.xz: perfx_r8 = this binary with kU 8 for SYM, one activation buffer) against
# the committed 6-slot ring, tg128 on the Q4_0 shapes, interleaved; (2) tools/device/llamacpp_peer.sh
# (STEPS="tiny 7b"): llama.cpp CUDA llama-bench (.devpack/llama.tar.xz) and perfx bench on the same
# random-weight Q4_0 GGUF files, back to back, plus perfx AWQ.
#   run: command "bash tools/device/session_peer13.sh", carry [".devpack"] (64 MiB: no room for
#   .devshared, which the benches do not need)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-560}
mkdir -p /tmp/var && tar -xJf .devpack/var.tar.xz -C /tmp/var
L=/tmp/peer13 && mkdir -p $L
for round in 1 2; do
  tg_line "r6 r$round" "$B/perfx" random:llama-2-7b:q4_0
  tg_line "r8 r$round" /tmp/var/perfx_r8 random:llama-2-7b:q4_0
  tg_line "r6 r$round" "$B/perfx" random:tinyllama-1.1b:q4_0
  tg_line "r8 r$round" /tmp/var/perfx_r8 random:tinyllama-1.1b:q4_0
done
echo "variants done $(( $(date +%s) - T0 )) s"
G=/tmp/peer_gguf
OUT=$L STEPS="tiny 7b" GGUF_DIR=$G PERFX=$B/perfx BUDGET=300 timeout 330 bash tools/device/llamacpp_peer.sh \
  > $L/peer.log 2>&1
echo "peer rc=$?"
sed -n '/==== SUMMARY/,$p' $L/peer.log
rm -f $G/*.gguf
tar -czf "$OUT/peer13_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
