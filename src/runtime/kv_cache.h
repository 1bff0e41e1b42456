// Paged KV cache bookkeeping (vLLM's PagedAttention, Kwon et al. 2023, arXiv 2309.06180):
// fixed-size blocks, per-sequence block tables, a free list, reference counts and prefix caching of
// full blocks keyed by a hash of all tokens up to and including the block. The storage itself is
// the backend's KvStorage; this class only hands out block ids.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <unordered_map>
#include <vector>

namespace perfx {

class BlockManager {
 public:
  BlockManager(int n_blocks, int block_size);

  int block_size() const { return block_size_; }
  int total_blocks() const { return n_blocks_; }
  /// Blocks that can be handed out now (free + cached-but-unreferenced, which are evicted LRU).
  int free_blocks() const { return (int)free_.size() + (int)evictable_.size(); }
  /// Blocks referenced by at least one sequence.
  int used_blocks() const { return n_blocks_ - free_blocks(); }

  void add_sequence(int64_t seq);
  /// Releases the sequence's blocks (full blocks stay cached for prefix reuse until evicted).
  void remove_sequence(int64_t seq);
  bool has_sequence(int64_t seq) const { return seqs_.count(seq) != 0; }
  int seq_len(int64_t seq) const;
  const std::vector<int32_t>& block_table(int64_t seq) const;

  /// For an empty sequence: attaches cached blocks matching the start of `tokens`; returns the
  /// number of tokens covered (a multiple of block_size, at most tokens.size() - 1 so that at least
  /// one token is left to compute logits from).
  int match_prefix(int64_t seq, const std::vector<int32_t>& tokens);
  /// Blocks that appending n tokens needs (beyond those the sequence already holds).
  int blocks_needed(int64_t seq, int n_tokens) const;
  /// Takes the blocks appending n tokens needs, so a later append() of them cannot fail: true on
  /// success (also when none were needed), false — taking nothing — when too few are free.
  bool allocate(int64_t seq, int n_tokens);
  /// Appends tokens: allocates blocks as needed and returns each token's slot. Throws perfx::Error
  /// if not enough blocks are free (the caller checks blocks_needed first).
  std::vector<int32_t> append(int64_t seq, const std::vector<int32_t>& tokens);
  /// Makes the sequence's newly filled blocks among its first `n_written` tokens (-1: all of them)
  /// available to prefix matching. Call only after the forward pass that wrote their K/V has
  /// completed (a block whose K/V were never written must never be shared).
  void commit(int64_t seq, int n_written = -1);
  /// Overlapped decode: replaces the token at `pos`, appended as a placeholder before it was
  /// sampled. Throws perfx::Error when pos is outside the sequence or in a committed block.
  void set_token(int64_t seq, int pos, int32_t token);
  /// Overlapped decode: forgets the tokens from `n_tokens` on (a step begun past the end of
  /// generation); the sequence keeps its blocks. Throws perfx::Error when that would cut into a
  /// committed block or lengthen the sequence.
  void truncate(int64_t seq, int n_tokens);

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    std::vector<int32_t> tokens;  // all tokens, for hashing full blocks
    uint64_t last_hash = 0;       // hash chain up to the last committed full block
    int n_committed = 0;          // full blocks already offered to the prefix cache
    int n_tokens = 0;
  };
  int32_t take_block();
  void release_block(int32_t b);
  static uint64_t hash_block(uint64_t prev, const int32_t* tokens, int n);

  int n_blocks_, block_size_;
  std::vector<int32_t> free_;
  std::vector<int> refs_;
  Seq& find_seq(int64_t seq);
  const Seq& find_seq(int64_t seq) const;

  std::vector<uint64_t> block_hash_;                // 0 = not a cached full block
  std::vector<std::vector<int32_t>> block_tokens_;  // tokens of a cached block (hits are verified)
  std::vector<int32_t> block_parent_;               // previous block of a cached block (-1: first)
  std::unordered_map<uint64_t, int32_t> cached_;    // hash -> block
  std::list<int32_t> evictable_;                    // cached blocks with ref 0, LRU order
  std::unordered_map<int32_t, std::list<int32_t>::iterator> evictable_pos_;
  std::map<int64_t, Seq> seqs_;
};

}  // namespace perfx
