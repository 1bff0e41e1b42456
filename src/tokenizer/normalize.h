// Normalizer chain (tokenizer.json "normalizer"): NFC, NFD, Lowercase, Prepend, Replace, Strip,
// ByteLevel; a Sequence is flattened into the chain.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace perfx::tok {

class Normalizer {
 public:
  /// Appends Unicode NFC composition.
  void add_nfc();
  /// Appends Unicode NFD decomposition.
  void add_nfd();
  /// Appends lowercasing (simple 1:1 Unicode mapping).
  void add_lowercase();
  /// Appends "prepend `text` when the piece is not empty" (HF Prepend).
  void add_prepend(std::string text);
  /// Appends "replace every occurrence of the literal `from` by `to`".
  void add_replace_string(std::string from, std::string to);
  /// Appends "replace every match of the regex `pattern` by `to`".
  void add_replace_regex(const std::string& pattern, std::string to);
  /// Appends stripping of Unicode whitespace on the left and/or right.
  void add_strip(bool left, bool right);
  /// Appends the GPT-2 byte-to-unicode mapping of every byte.
  void add_byte_level();

  bool empty() const { return steps_.empty(); }
  /// Runs the chain on one piece of (valid UTF-8) text.
  std::string apply(std::string_view text) const;

 private:
  enum class Kind {
    kNFC,
    kNFD,
    kLower,
    kPrepend,
    kReplaceString,
    kReplaceRegex,
    kStrip,
    kByteLevel
  };
  struct Step {
    Kind kind = Kind::kNFC;
    std::string a, b;
    std::shared_ptr<Regex> re;
    bool left = false, right = false;
  };
  static Step make(Kind kind, std::string a = {}, std::string b = {});
  std::vector<Step> steps_;
};

}  // namespace perfx::tok
