// Unicode data tables used by the tokenizer's normalizers (generated; see
// tools/gen_unicode_tables.py).
#pragma once

#include <cstddef>
#include <cstdint>

namespace perfx::tok::tables {

/// Code points first..last (inclusive) have canonical combining class ccc (only ccc != 0 listed).
struct CccRange {
  uint32_t first, last;
  uint8_t ccc;
};
/// Canonical one-level decomposition: cp -> first (+ second when second != 0).
struct Decomp {
  uint32_t cp, first, second;
};
/// Primary composite: first + second -> cp (sorted by first, second).
struct Compose {
  uint32_t first, second, cp;
};
/// Simple 1:1 case mapping.
struct CaseMap {
  uint32_t from, to;
};

extern const char* const kUnicodeVersion;
extern const CccRange kCcc[];
extern const size_t kCccCount;
extern const Decomp kDecomp[];  // sorted by cp
extern const size_t kDecompCount;
extern const Compose kCompose[];
extern const size_t kComposeCount;
extern const CaseMap kLower[];  // sorted by from
extern const size_t kLowerCount;

}  // namespace perfx::tok::tables
