// Token string <-> id table shared by the models and the tokenizer pipeline: token texts live in
// one arena and are found through an open-addressing hash table (hundreds of thousands of lookups
// happen while the merges of a large tokenizer.json are loaded).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace perfx::tok {

/// Hash that lets unordered_map<std::string, ...> be queried with std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

/// The largest token id a vocabulary may use: 2^24 - 1, 64 times the largest real vocabularies
/// (~256k). A tokenizer.json naming a larger id would make the id tables allocate gigabytes
/// (fuzz_tokenizer_json: a 3 KB file asked for 6 GB); it is an error instead.
constexpr int32_t kMaxTokenId = (1 << 24) - 1;

class Vocab {
 public:
  /// Sets the token text of `id` (growing the table) and maps the text to `id` (a later id with
  /// the same text wins, as in llama.cpp).
  void set(int32_t id, std::string_view text);
  /// Reserves room for `n` tokens.
  void reserve(size_t n);
  /// The id of `text`, or -1.
  int32_t find(std::string_view text) const;
  /// Number of ids (max id + 1).
  int32_t size() const { return static_cast<int32_t>(spans_.size()); }
  /// The text of `id` (empty for an id that was never set). Valid until the next set().
  std::string_view text(int32_t id) const {
    const Span& s = spans_[id];
    return std::string_view(arena_.data() + s.off, s.len);
  }

 private:
  struct Span {
    uint32_t off = 0, len = 0;
  };
  struct Slot {
    uint32_t tag = 0;  // high bits of the hash
    int32_t id = -1;   // -1: empty
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  void rehash(size_t capacity);

  std::string arena_;
  std::vector<Span> spans_;
  std::vector<Slot> slots_;  // power-of-two size
  size_t used_ = 0;
};

/// A subword model: turns one pre-token into ids.
class Model {
 public:
  virtual ~Model() = default;
  /// Appends the ids of `word` (one pre-token, valid UTF-8) to `out`.
  virtual void encode_word(std::string_view word, std::vector<int32_t>& out) const = 0;
};

}  // namespace perfx::tok
