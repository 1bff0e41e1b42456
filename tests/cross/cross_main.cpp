// main() of the cross-compiled kernel tests (tests/cross/gtest/gtest.h): runs every TEST, prints
// one line per test and "N passed, N failed" last; exit code 1 on any failure.
#include <cstdio>

#include "gtest/gtest.h"

int main() {
  int passed = 0, failed = 0;
  for (const auto& t : testing::registry()) {
    testing::failures() = 0;
    t.fn();
    const bool ok = testing::failures() == 0;
    std::printf("[%s] %s.%s\n", ok ? "  OK  " : "FAILED", t.suite, t.name);
    (ok ? passed : failed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
