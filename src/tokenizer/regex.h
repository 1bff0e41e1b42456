// PCRE2 (UTF + Unicode properties, JIT when available) wrapper for the tokenizer's split patterns.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace perfx::tok {

class Regex {
 public:
  /// Compiles `pattern` (PCRE2_UTF | PCRE2_UCP; PCRE2_LITERAL when `literal`). Throws perfx::Error
  /// with the PCRE2 message and offset when the pattern does not compile.
  explicit Regex(const std::string& pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Appends the [begin, end) byte ranges of all non-overlapping matches in `text` (valid UTF-8),
  /// scanning left to right. Empty matches are skipped.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  /// Replaces every match by `with`.
  std::string replace_all(std::string_view text, std::string_view with) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace perfx::tok
