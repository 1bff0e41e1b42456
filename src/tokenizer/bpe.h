// Rank-based BPE (tokenizer.json model type "BPE"): lowest-rank merge first, leftmost on ties;
// byte fallback to <0xXX>, unk with optional fusing, ignore_merges, subword prefix/suffix.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace perfx::tok {

class BpeModel : public Model {
 public:
  struct Options {
    int32_t unk_id = -1;         // -1: no unk token (characters missing from vocab are dropped)
    bool fuse_unk = false;       // consecutive unknown characters become one unk
    bool byte_fallback = false;  // unknown characters become <0xXX> byte tokens
    bool ignore_merges = false;  // a word that is itself in vocab is emitted directly
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
  };

  BpeModel(std::shared_ptr<const Vocab> vocab, Options opts);

  /// Reserves room for `n` merges.
  void reserve_merges(size_t n);
  /// Adds the merge rule `a` + `b` with the next rank (rules must be added in rank order). Throws
  /// perfx::Error naming the rule when a part or the merged token is missing from the vocab.
  void add_merge(std::string_view a, std::string_view b);
  size_t merge_count() const { return n_merges_; }

  /// Appends the ids of `word`. Results for short words are cached (thread-safe; the cache is
  /// bounded and simply cleared when full).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;

  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheShardEntries = 8192;
  static constexpr size_t kCacheMaxWordBytes = 48;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;

  struct Slot {
    uint64_t key = 0;  // 0 = empty
    int32_t rank = 0;
    int32_t id = 0;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return ((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b)) + 1;
  }
  void insert(uint64_t key, int32_t rank, int32_t id);
  const Slot* lookup(int32_t a, int32_t b) const;
  void grow();

  std::shared_ptr<const Vocab> vocab_;
  Options opts_;
  std::vector<Slot> table_;  // open addressing, power-of-two size
  size_t n_merges_ = 0;
  int32_t byte_ids_[256];  // <0xXX> ids (-1 when absent), for byte fallback
  std::string merge_buf_;  // scratch for add_merge
};

}  // namespace perfx::tok
