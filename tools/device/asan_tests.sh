#!/usr/bin/env bash
# Builds the test suite with AddressSanitizer + UBSan on the GPU machine (16 cores) and runs it.
# The machine lacks pcre2.h and cpp-httplib: carry pcre2.h and httplib.h in .devdeps/include and
# Debian's libcpp-httplib.so (+ brotli) in .devdeps/lib, or run with SERVER=OFF.
set -uo pipefail
SHARED=${PERFX_SHARED_DIR:-}
SERVER=${SERVER:-ON}
export LD_LIBRARY_PATH="$PWD/.devdeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S . -B /tmp/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPERFX_SANITIZE=ON -DPERFX_SERVER=$SERVER \
  -DHTTPLIB_INCLUDE="$PWD/.devdeps/include" -DHTTPLIB_LIB="$PWD/.devdeps/lib/libcpp-httplib.so" \
  -DPERFX_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$PWD/.devdeps" -DPCRE2_INCLUDE_DIR="$PWD/.devdeps/include" \
  ${SHARED:+-DPERFX_SHARED_DIR=$SHARED} > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build /tmp/asan -j16 > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir /tmp/asan -j16 --output-on-failure > "$OUT/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|Failed|\*\*\*|SKIPPED|Sanitizer" "$OUT/ctest.log" | head -40
exit $rc
