// Pre-tokenizer chain (tokenizer.json "pre_tokenizer"): Split (regex/string, all five delimiter
// behaviours, invert), ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation; a
// Sequence is flattened into the chain. Output words feed the model one by one.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace perfx::tok {

/// One pre-token. `at_start`: it begins at offset 0 of the original input (Metaspace "first").
struct PreToken {
  std::string text;
  bool at_start = false;
};

/// HF SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
/// HF Metaspace PrependScheme.
enum class PrependScheme { kAlways, kFirst, kNever };

/// The GPT-2 pre-tokenization regex (HF ByteLevel use_regex=true).
extern const char* const kGpt2Pattern;
/// Llama-3's Split regex (digits in groups of up to three).
extern const char* const kLlama3Pattern;
/// Qwen2/2.5/3's Split regex (single digits).
extern const char* const kQwen2Pattern;

class PreTokenizer {
 public:
  /// Split on matches of `re` with the given behaviour (invert: the matches are the content).
  void add_split(std::shared_ptr<const Regex> re, SplitBehavior behavior, bool invert);
  /// ByteLevel: optional leading space, optional GPT-2 regex split, then bytes -> alphabet chars.
  void add_byte_level(bool add_prefix_space, bool use_regex);
  /// Metaspace: ' ' -> replacement, prepend per scheme, optional split before each replacement.
  void add_metaspace(std::string replacement, PrependScheme scheme, bool split);
  /// Digits: isolate each digit (individual) or each run of digits.
  void add_digits(bool individual);
  /// Whitespace: keep runs of word characters and runs of other non-space characters.
  void add_whitespace();
  /// WhitespaceSplit: split on whitespace, dropping it.
  void add_whitespace_split();
  /// Punctuation: every punctuation character is a delimiter with `behavior`.
  void add_punctuation(SplitBehavior behavior);

  bool empty() const { return steps_.empty(); }
  /// True when a ByteLevel step maps the text into the byte alphabet.
  bool byte_level() const { return byte_level_; }

  /// Pre-tokenizes one normalized piece (valid UTF-8) and appends its words to `out`.
  void run(std::string text, bool at_start, std::vector<PreToken>& out) const;

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  struct Step {
    Kind kind = Kind::kSplit;
    std::shared_ptr<const Regex> re;  // kSplit; kByteLevel when use_regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    std::string replacement;        // kMetaspace
    PrependScheme scheme = PrependScheme::kAlways;
    bool split = true;  // kMetaspace
  };
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

/// Splits `piece` by the matches of `re` following `behavior` and appends non-empty parts to out.
void split_by_regex(const Regex& re, SplitBehavior behavior, bool invert, const PreToken& piece,
                    std::vector<PreToken>& out);

}  // namespace perfx::tok
