// NFD / NFC (UAX #15) and lowercasing over the generated Unicode tables.
#include "tokenizer/unicode_norm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_tables.h"

namespace perfx::tok {
namespace {

using namespace tables;

// Hangul syllable arithmetic (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  const CccRange* end = kCcc + kCccCount;
  const CccRange* it =
      std::upper_bound(kCcc, end, cp, [](uint32_t c, const CccRange& r) { return c < r.first; });
  if (it == kCcc) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const Decomp* decomp_of(uint32_t cp) {
  if (cp < 0xC0) return nullptr;
  const Decomp* end = kDecomp + kDecompCount;
  const Decomp* it =
      std::lower_bound(kDecomp, end, cp, [](const Decomp& d, uint32_t c) { return d.cp < c; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

void decompose_into(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomp* d = decomp_of(cp);
  if (!d) {
    out.push_back(cp);
    return;
  }
  decompose_into(d->first, out);
  if (d->second) decompose_into(d->second, out);
}

// Decomposes and puts each run of non-starters into canonical (stable, by ccc) order.
std::vector<uint32_t> decompose_ordered(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) decompose_into(utf8_next_valid(s, pos), cps);
  size_t i = 0;
  while (i < cps.size()) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  return cps;
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const Compose* end = kCompose + kComposeCount;
  const Compose* it =
      std::lower_bound(kCompose, end, std::make_pair(a, b),
                       [](const Compose& c, const std::pair<uint32_t, uint32_t>& k) {
                         return c.first < k.first || (c.first == k.first && c.second < k.second);
                       });
  return (it != end && it->first == a && it->second == b) ? it->cp : 0;
}

// Code points that can appear as the second element of a composition.
const std::vector<uint32_t>& composition_seconds() {
  static const std::vector<uint32_t> v = [] {
    std::vector<uint32_t> r;
    for (size_t i = 0; i < kComposeCount; ++i) r.push_back(kCompose[i].second);
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    return r;
  }();
  return v;
}

// True when `cp` might be changed by NFC or might change its neighbour (full table check).
bool nfc_sensitive_slow(uint32_t cp) {
  if (cp < 0x300) return false;  // all of Latin-1 and Latin Extended-A/B are stable starters
  if (cp >= kSBase && cp < kSBase + kSCount) return false;  // precomposed Hangul syllables
  if ((cp >= kVBase && cp < kVBase + kVCount) || (cp > kTBase && cp < kTBase + kTCount))
    return true;  // Hangul jamo V/T compose with what precedes
  if (ccc_of(cp) != 0 || decomp_of(cp)) return true;
  const auto& sec = composition_seconds();
  return std::binary_search(sec.begin(), sec.end(), cp);
}

// nfc_sensitive_slow for the whole BMP as a bitmap (8 KiB), built on first use.
bool nfc_sensitive(uint32_t cp) {
  static const std::vector<uint64_t> bmp = [] {
    std::vector<uint64_t> bits(0x10000 / 64, 0);
    for (uint32_t c = 0x300; c < 0x10000; ++c)
      if (nfc_sensitive_slow(c)) bits[c >> 6] |= uint64_t{1} << (c & 63);
    return bits;
  }();
  if (cp < 0x10000) return (bmp[cp >> 6] >> (cp & 63)) & 1;
  return nfc_sensitive_slow(cp);
}

std::string encode(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size() * 2);
  for (uint32_t c : cps) utf8_append(out, c);
  return out;
}

}  // namespace

std::string to_nfd(std::string_view s) {
  return encode(decompose_ordered(s));
}

std::string to_nfc(std::string_view s) {
  {
    // Quick check: nothing NFC could touch (the common case, including CJK and ASCII text).
    size_t pos = 0;
    bool sensitive = false;
    while (pos < s.size() && !sensitive) sensitive = nfc_sensitive(utf8_next_valid(s, pos));
    if (!sensitive) return std::string(s);
  }
  std::vector<uint32_t> cps = decompose_ordered(s);
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  ptrdiff_t starter = -1;  // index in `out` of the last starter
  int last_ccc = -1;       // ccc of the last character appended after the starter
  for (uint32_t cp : cps) {
    const int ccc = ccc_of(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<size_t>(starter) + 1 == out.size();
      if (adjacent || (last_ccc < ccc && last_ccc != 0)) {
        if (uint32_t comp = compose_pair(out[starter], cp)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = static_cast<ptrdiff_t>(out.size());
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  return encode(out);
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[pos]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++pos;
      continue;
    }
    const uint32_t cp = utf8_next_valid(s, pos);
    const CaseMap* end = kLower + kLowerCount;
    const CaseMap* it =
        std::lower_bound(kLower, end, cp, [](const CaseMap& m, uint32_t c) { return m.from < c; });
    utf8_append(out, (it != end && it->from == cp) ? it->to : cp);
  }
  return out;
}

}  // namespace perfx::tok
