#!/usr/bin/env bash
# Release build on the GPU machine's CPUs, then the serving scale-up check and the engine decode-step
# benchmark pinned to 2 cores (taskset), i.e. a quiet stand-in for the 2-core development/CI box.
# Carry .devdeps (pcre2.h, httplib.h, libcpp-httplib.so + brotli), as for asan_tests.sh.
set -uo pipefail
export LD_LIBRARY_PATH="$PWD/.devdeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S . -B /tmp/rel -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DHTTPLIB_INCLUDE="$PWD/.devdeps/include" -DHTTPLIB_LIB="$PWD/.devdeps/lib/libcpp-httplib.so" \
  -DCMAKE_PREFIX_PATH="$PWD/.devdeps" -DPCRE2_INCLUDE_DIR="$PWD/.devdeps/include" > "$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build /tmp/rel -j16 > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
lscpu | grep -E "Model name|^CPU\(s\)|L3"
CORES=${CORES:-0,1}
for i in 1 2 3; do
  taskset -c "$CORES" ctest --test-dir /tmp/rel -R SixtyFour -V 2>&1 | grep -E "perfx \]|Passed|Failed"
done
if [[ -x /tmp/rel/bench/perfx_bench ]]; then
  taskset -c "$CORES" /tmp/rel/bench/perfx_bench --benchmark_filter='DecodeStep|Dense' --benchmark_min_time=0.5 2>&1 |
    grep -E "Decode|Dense"
fi
