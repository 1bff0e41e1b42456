// Decoder chain (tokenizer.json "decoder"): ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace; a Sequence is flattened. Works on token strings that may hold raw bytes; the caller
// turns the final bytes into valid UTF-8 (so ByteFallback/ByteLevel bytes that form a character
// across tokens decode correctly, and invalid bytes become U+FFFD once, at the end).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/regex.h"

namespace perfx::tok {

class Decoder {
 public:
  /// Every token's characters map back to bytes through the GPT-2 alphabet (a token with a
  /// character outside the alphabet is kept as is); the tokens are then fused.
  void add_byte_level();
  /// Every literal `from` in each token becomes `to`.
  void add_replace_string(std::string from, std::string to);
  /// Every match of `pattern` in each token becomes `to`.
  void add_replace_regex(const std::string& pattern, std::string to);
  /// Tokens of the form <0xXX> become the raw byte XX.
  void add_byte_fallback();
  /// All tokens are concatenated into one.
  void add_fuse();
  /// Each token loses up to `start` leading and `stop` trailing `content` characters.
  void add_strip(std::string content, size_t start, size_t stop);
  /// `replacement` becomes ' '; in the first token it is removed unless scheme is kNever.
  void add_metaspace(std::string replacement, PrependScheme scheme);

  /// True when no decoder was configured (HF then joins tokens with a space).
  bool empty() const { return steps_.empty(); }

  /// Runs the chain and concatenates the result (raw bytes, possibly invalid UTF-8).
  std::string run(std::vector<std::string> tokens) const;

 private:
  enum class Kind {
    kByteLevel,
    kReplaceString,
    kReplaceRegex,
    kByteFallback,
    kFuse,
    kStrip,
    kMetaspace
  };
  struct Step {
    Kind kind = Kind::kFuse;
    std::string a, b;
    std::shared_ptr<Regex> re;
    size_t start = 0, stop = 0;
    PrependScheme scheme = PrependScheme::kAlways;
  };
  std::vector<Step> steps_;
};

}  // namespace perfx::tok
