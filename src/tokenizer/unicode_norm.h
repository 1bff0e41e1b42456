// Unicode normalization forms (canonical: NFD, NFC) and simple lowercasing, from generated tables.
#pragma once

#include <string>
#include <string_view>

namespace perfx::tok {

/// Canonical decomposition + canonical ordering (Unicode UAX #15 NFD). Input must be valid UTF-8.
std::string to_nfd(std::string_view s);
/// Canonical composition (UAX #15 NFC), including Hangul. Input must be valid UTF-8. Text that
/// contains no character that NFC could change is returned unchanged without work.
std::string to_nfc(std::string_view s);
/// Simple (1:1) Unicode lowercase mapping of every character. Input must be valid UTF-8.
std::string to_lower(std::string_view s);

}  // namespace perfx::tok
