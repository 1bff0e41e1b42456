#!/usr/bin/env bash
# Twentieth session, call 1: the L2 prefetch probe (bench/cuda/l2_prefetch_probe.cu), built here
# with the device's nvcc: does a range prefetched to L2 read back faster, and what does handing it
# over cost? (docs/cuda_linear_notes.md §26.)
set -uo pipefail
OUT=${OUT:-/tmp/perfx_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv,noheader
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/l2probe \
  bench/cuda/l2_prefetch_probe.cu || exit 1
timeout 400 /tmp/l2probe "${REPS:-11}" | tee "$OUT/l2probe.txt"
# Whether ptxas kept the loads: global loads per kernel in the SASS.
cuobjdump -sass /tmp/l2probe 2>/dev/null | awk '/Function :/ {f=$3} /LDG/ {n[f]++} END {for (k in n) print "LDG in", k, n[k]}'
