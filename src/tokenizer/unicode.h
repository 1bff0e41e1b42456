// UTF-8 helpers and the GPT-2 byte <-> unicode alphabet used by byte-level BPE tokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace perfx::tok {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

/// Appends the UTF-8 encoding of `cp` (must be a scalar value) to `out`.
void utf8_append(std::string& out, uint32_t cp);

/// Decodes one well-formed UTF-8 character at `pos`. On success stores the code point, advances
/// `pos` and returns true; on an ill-formed or truncated sequence returns false and leaves `pos`.
bool utf8_next(std::string_view s, size_t& pos, uint32_t& cp);

/// Decodes the character at `pos` of text known to be valid UTF-8 and advances `pos`.
uint32_t utf8_next_valid(std::string_view s, size_t& pos);

/// Byte length of the UTF-8 character that starts with lead byte `b` (1 for invalid leads).
inline size_t utf8_char_len(uint8_t b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

/// True when `s` is well-formed UTF-8.
bool utf8_is_valid(std::string_view s);

/// Converts bytes to valid UTF-8, replacing every maximal ill-formed subpart by U+FFFD (the
/// Unicode "substitution of maximal subparts" practice, as Rust's String::from_utf8_lossy).
/// When `final` is false, a truncated-but-so-far-valid sequence at the end is not converted; the
/// return value is the number of input bytes consumed (appended to `out`). Feeding the rest later
/// gives the same result as converting everything at once.
size_t utf8_lossy_append(std::string_view in, bool final, std::string& out);

/// utf8_lossy_append(in, true, out) on a fresh string.
std::string utf8_lossy(std::string_view in);

/// Unicode White_Space (what Rust's char::is_whitespace tests).
bool is_unicode_whitespace(uint32_t cp);

/// GPT-2 bytes_to_unicode: the UTF-8 text of the printable character standing for byte `b`.
const std::string& byte_to_unicode(uint8_t b);
/// Inverse of byte_to_unicode on code points: the byte, or -1 when `cp` is not in the alphabet.
int unicode_to_byte(uint32_t cp);

}  // namespace perfx::tok
