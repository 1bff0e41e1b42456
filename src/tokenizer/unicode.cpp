// UTF-8 encoding/decoding, lossy conversion and the GPT-2 byte alphabet.
#include "tokenizer/unicode.h"

#include <array>

namespace perfx::tok {

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Result of examining the sequence at one position.
struct SeqCheck {
  enum Kind { kValid, kInvalid, kTruncated } kind;
  size_t
      len;  // bytes of the valid char, of the maximal ill-formed subpart, or available (truncated)
  uint32_t cp;
};

// Checks the sequence at `pos` following the Unicode table of well-formed byte sequences.
SeqCheck check_at(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {SeqCheck::kValid, 1, b0};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {SeqCheck::kInvalid, 1, 0};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= avail) return {SeqCheck::kTruncated, k, 0};
    const uint8_t b = p[k];
    const uint8_t l = (k == 1) ? lo : 0x80, h = (k == 1) ? hi : 0xBF;
    if (b < l || b > h) return {SeqCheck::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {SeqCheck::kValid, need + 1, cp};
}

}  // namespace

bool utf8_next(std::string_view s, size_t& pos, uint32_t& cp) {
  if (pos >= s.size()) return false;
  const SeqCheck c = check_at(s, pos);
  if (c.kind != SeqCheck::kValid) return false;
  cp = c.cp;
  pos += c.len;
  return true;
}

uint32_t utf8_next_valid(std::string_view s, size_t& pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    pos += 2;
    return ((b0 & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  }
  if (b0 < 0xF0) {
    pos += 3;
    return ((b0 & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  }
  pos += 4;
  return ((b0 & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
}

bool utf8_is_valid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII fast path.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const SeqCheck c = check_at(s, pos);
    if (c.kind != SeqCheck::kValid) return false;
    pos += c.len;
  }
  return true;
}

size_t utf8_lossy_append(std::string_view in, bool final, std::string& out) {
  size_t pos = 0;
  while (pos < in.size()) {
    const SeqCheck c = check_at(in, pos);
    if (c.kind == SeqCheck::kValid) {
      out.append(in.data() + pos, c.len);
      pos += c.len;
    } else if (c.kind == SeqCheck::kInvalid) {
      utf8_append(out, kReplacementChar);
      pos += c.len;
    } else {  // truncated at the end of the input
      if (!final) return pos;
      utf8_append(out, kReplacementChar);
      pos = in.size();
    }
  }
  return pos;
}

std::string utf8_lossy(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  utf8_lossy_append(in, true, out);
  return out;
}

bool is_unicode_whitespace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> to_text;
  std::array<uint32_t, 256> to_cp{};
  ByteAlphabet() {
    // Printable bytes stand for themselves; the other 68 map in order to U+0100, U+0101, ...
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      utf8_append(to_text[b], to_cp[b]);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) {
  return alphabet().to_text[b];
}

int unicode_to_byte(uint32_t cp) {
  // The alphabet covers U+0021..U+00FF (minus a few) and U+0100..U+0143.
  if (cp < 0x100) {
    const bool printable = (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174);
    return printable ? static_cast<int>(cp) : -1;
  }
  if (cp < 0x100 + 68) {
    static const auto inverse = [] {
      std::array<int, 68> inv{};
      const ByteAlphabet& a = alphabet();
      for (int b = 0; b < 256; ++b)
        if (a.to_cp[b] >= 0x100) inv[a.to_cp[b] - 0x100] = b;
      return inv;
    }();
    return inverse[cp - 0x100];
  }
  return -1;
}

}  // namespace perfx::tok
