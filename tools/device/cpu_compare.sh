#!/usr/bin/env bash
# Issue 11 on the GPU machine's CPU: perfx vs llama.cpp at real sizes (random weights in the exact
# TinyLlama-1.1B and Llama-2-7B shapes), both pinned to cores 0-1 with 2 threads, back to back
# (bench/compare/int4_compare.py --direct: every matrix Q4_0 in the GGUF both engines read;
# perfx also runs its AWQ g128 synthetic model). Builds llama.cpp there natively (AMX, AVX-512).
# Prepare here with tools/device/pack_cpu_compare.sh LLAMA_CPP_CHECKOUT, then
#   run: command "bash tools/device/cpu_compare.sh", carry [".devcpu"]   (~6 minutes)
# Environment: ROUNDS (1), CORES (0-1), SHAPES (tinyllama-1.1b,llama-2-7b). Logs in $OUT/cpu_logs.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/perfx_out}
L=$OUT/cpu_logs
mkdir -p "$L"
export LD_LIBRARY_PATH="$ROOT/.devcpu/lib:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
{
  echo "perfx $(cat .devcpu/PERFX_COMMIT 2>/dev/null), llama.cpp $(cat .devcpu/LLAMA_COMMIT 2>/dev/null)"
  lscpu | grep -E "Model name|^CPU\(s\)|L3" | sed 's/  */ /g'
  grep -o -w -E "avx512_vnni|avx_vnni|amx_int8|avx512f" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
} > "$L/machine.txt" 2>&1
rm -rf /tmp/llama-cpu && mkdir -p /tmp/llama-cpu && tar -xzf .devcpu/llama-src.tar.gz -C /tmp/llama-cpu
cmake -S /tmp/llama-cpu -B /tmp/llama-cpu/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF > "$L/llama_cmake.log" 2>&1 &&
  cmake --build /tmp/llama-cpu/b -j"$(nproc)" --target llama-bench llama-quantize > "$L/llama_build.log" 2>&1 ||
  { echo "llama.cpp build FAILED:"; tail -20 "$L/llama_build.log" "$L/llama_cmake.log"; exit 1; }
echo "llama.cpp built in $(( $(date +%s) - T0 )) s" >> "$L/machine.txt"
"$ROOT/.devcpu/perfx" bench -m random:tinyllama-1.1b -p 8 -n 2 -r 1 -t 2 > "$L/perfx_smoke.log" 2>&1 ||
  { echo "perfx does not run here:"; tail -5 "$L/perfx_smoke.log"; exit 1; }
python3 bench/compare/int4_compare.py --llama-bin /tmp/llama-cpu/b/bin --perfx "$ROOT/.devcpu/perfx" \
  --work /tmp/perfx-cmp --direct --vocab "$ROOT/.devcpu/ggml-vocab-llama-spm.gguf" \
  --cores "${CORES:-0-1}" --threads 2 \
  --shapes "${SHAPES:-tinyllama-1.1b,llama-2-7b}" \
  --pp tinyllama-1.1b=512,llama-2-7b=128 --tg tinyllama-1.1b=128,llama-2-7b=32 --reps 2 \
  --rounds "${ROUNDS:-1}" --json-out "$L/compare.json" > "$L/compare.md" 2> "$L/compare.log"
rc=$?
echo "==================== $(( $(date +%s) - T0 )) s, compare rc=$rc"
cat "$L/machine.txt"
tail -4 "$L/compare.log"
cat "$L/compare.md"
