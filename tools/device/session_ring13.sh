#!/usr/bin/env bash
# Thirteenth session, third call: the symmetric-record w4_gemv3's ring, beyond §21's 6 → 8 slots.
# .devpack/var.tar.xz holds two builds of this tree differing only in linear_gemv3.cu: perfx_r10
# (ring_slots 10 for sym, one activation buffer; the default split follows the ring) and
# perfx_r8x2 (8 slots, two activation buffers), each with its linear kernel test (lin10/,
# lin8x2/). Against this binary (8 slots, one buffer): the GEMV kernel tests of each variant,
# then tg128 on random:llama-2-7b:q4_0 (two rounds) and random:tinyllama-1.1b:q4_0 (one),
# interleaved.
#   run: command "bash tools/device/session_ring13.sh", carry [".devpack"]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/device/devbin.sh
BUDGET=${BUDGET:-400}
mkdir -p /tmp/var && tar -xJf .devpack/var.tar.xz -C /tmp/var
L=/tmp/ring13 && mkdir -p $L
for v in 10 8x2; do
  timeout 60 /tmp/var/lin$v/linear_kernels_test --only gemv > $L/gemv_$v.log 2>&1
  kernel_line "gemv r$v" $? $L/gemv_$v.log
done
for round in 1 2; do
  tg_line "r8 r$round" "$B/perfx" random:llama-2-7b:q4_0
  tg_line "r10 r$round" /tmp/var/perfx_r10 random:llama-2-7b:q4_0
  tg_line "r8x2 r$round" /tmp/var/perfx_r8x2 random:llama-2-7b:q4_0
done
tg_line "r8" "$B/perfx" random:tinyllama-1.1b:q4_0
tg_line "r10" /tmp/var/perfx_r10 random:tinyllama-1.1b:q4_0
tg_line "r8x2" /tmp/var/perfx_r8x2 random:tinyllama-1.1b:q4_0
tar -czf "$OUT/ring13_logs.tgz" -C $L . 2> /dev/null
echo "total $(( $(date +%s) - T0 )) s"
