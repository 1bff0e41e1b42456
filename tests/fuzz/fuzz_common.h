// Helpers shared by the libFuzzer targets in this folder (tests/fuzz/README.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

namespace perfx::fuzz {

/// Prints "fuzz target: <msg>" to stderr and aborts the fuzz run (a broken setup, not a finding).
[[noreturn]] inline void die(const std::string& msg) {
  std::fprintf(stderr, "fuzz target: %s\n", msg.c_str());
  std::exit(2);
}

/// A check of an invariant the target asserts: a failure is a finding (abort -> libFuzzer crash).
#define FUZZ_ASSERT(cond, what)                                                      \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d): %s\n", #cond, __FILE__, \
                   __LINE__, what);                                                  \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

/// The shared fixtures folder: $PERFX_SHARED_DIR, else the build's default (../shared).
inline std::string shared_dir() {
  const char* env = std::getenv("PERFX_SHARED_DIR");
  if (env && *env) return env;
#ifdef PERFX_DEFAULT_SHARED_DIR
  return PERFX_DEFAULT_SHARED_DIR;
#else
  return "../shared";
#endif
}

/// Splits the input at the first NUL byte (never valid inside JSON text): {before, after}; after
/// is empty when there is no NUL.
inline std::pair<std::string, std::string> split_nul(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  const size_t p = s.find('\0');
  if (p == std::string_view::npos) return {std::string(s), std::string()};
  return {std::string(s.substr(0, p)), std::string(s.substr(p + 1))};
}

/// True when s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
inline bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = (unsigned char)s[i];
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) {
      const unsigned char d = (unsigned char)s[i + k];
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      return false;
    i += (size_t)n;
  }
  return true;
}

}  // namespace perfx::fuzz
