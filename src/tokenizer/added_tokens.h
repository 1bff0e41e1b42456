// Added tokens (tokenizer.json "added_tokens", GGUF control/user-defined tokens): found in the text
// before the model runs, leftmost then longest match, honouring lstrip/rstrip/single_word.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace perfx::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;      // skipped by parse_special=false and by decode(skip_special)
  bool lstrip = false;       // the match absorbs whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched on normalized text instead of the raw input
};

/// One part of the input: a text range, or a matched added token.
struct Segment {
  size_t begin = 0, end = 0;
  int32_t id = -1;  // -1: plain text
};

class AddedTokenMatcher {
 public:
  /// Adds a token to the set this matcher looks for.
  void add(const AddedToken& t);
  bool empty() const { return tokens_.empty(); }

  /// Splits `text` into text segments and token matches (in order, covering the text except
  /// whitespace absorbed by lstrip/rstrip). parse_special=false ignores tokens marked special.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_ ending here
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_{1};
  bool first_byte_[256] = {};  // bytes that start some token (fast skip)
};

}  // namespace perfx::tok
