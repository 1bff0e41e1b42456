#include "runtime/kv_cache.h"

#include <algorithm>

#include "perfx/status.h"

namespace perfx {

BlockManager::BlockManager(int n_blocks, int block_size)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      refs_(n_blocks, 0),
      block_hash_(n_blocks, 0),
      block_tokens_(n_blocks),
      block_parent_(n_blocks, -1) {
  check(n_blocks > 0 && block_size > 0, "KV cache needs at least one block of at least one token");
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out low ids first
}

uint64_t BlockManager::hash_block(uint64_t prev, const int32_t* tokens, int n) {
  // FNV-1a over the previous hash and the block's tokens; 0 is reserved for "no hash".
  uint64_t h = 1469598103934665603ull ^ prev;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(prev);
  for (int i = 0; i < n; ++i) mix((uint32_t)tokens[i]);
  return h ? h : 1;
}

void BlockManager::add_sequence(int64_t seq) {
  check(!seqs_.count(seq), "sequence " + std::to_string(seq) + " already exists");
  seqs_[seq] = Seq{};
}

BlockManager::Seq& BlockManager::find_seq(int64_t seq) {
  auto it = seqs_.find(seq);
  check(it != seqs_.end(), "unknown sequence " + std::to_string(seq));
  return it->second;
}

const BlockManager::Seq& BlockManager::find_seq(int64_t seq) const {
  auto it = seqs_.find(seq);
  check(it != seqs_.end(), "unknown sequence " + std::to_string(seq));
  return it->second;
}

int BlockManager::seq_len(int64_t seq) const {
  return find_seq(seq).n_tokens;
}

const std::vector<int32_t>& BlockManager::block_table(int64_t seq) const {
  return find_seq(seq).blocks;
}

int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    check(!evictable_.empty(), "KV cache is full");
    b = evictable_.front();  // least recently used cached block
    evictable_.pop_front();
    evictable_pos_.erase(b);
    cached_.erase(block_hash_[b]);
    block_hash_[b] = 0;
    block_tokens_[b].clear();
    block_parent_[b] = -1;
  }
  refs_[b] = 1;
  return b;
}

void BlockManager::release_block(int32_t b) {
  if (--refs_[b] > 0) return;
  if (block_hash_[b] != 0) {
    evictable_.push_back(b);
    evictable_pos_[b] = std::prev(evictable_.end());
  } else {
    free_.push_back(b);
  }
}

void BlockManager::remove_sequence(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  // Last block first: the LRU list then evicts the tails of cached prefixes before their roots.
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) release_block(*b);
  seqs_.erase(it);
}

int BlockManager::match_prefix(int64_t seq, const std::vector<int32_t>& tokens) {
  Seq& s = find_seq(seq);
  check(s.n_tokens == 0, "match_prefix on a non-empty sequence");
  const int max_blocks = tokens.empty() ? 0 : ((int)tokens.size() - 1) / block_size_;
  uint64_t h = 0;
  int n = 0;
  for (int i = 0; i < max_blocks; ++i) {
    const uint64_t nh = hash_block(h, tokens.data() + i * block_size_, block_size_);
    auto c = cached_.find(nh);
    if (c == cached_.end()) break;
    const int32_t b = c->second;
    // Verify: same tokens and same parent block (a hash match alone could be a collision).
    const int32_t parent = s.blocks.empty() ? -1 : s.blocks.back();
    if (block_parent_[b] != parent ||
        !std::equal(block_tokens_[b].begin(), block_tokens_[b].end(),
                    tokens.begin() + i * block_size_) ||
        (int)block_tokens_[b].size() != block_size_)
      break;
    if (refs_[b] == 0) {
      evictable_.erase(evictable_pos_.at(b));
      evictable_pos_.erase(b);
    }
    refs_[b]++;
    s.blocks.push_back(b);
    h = nh;
    n = (i + 1) * block_size_;
  }
  s.tokens.assign(tokens.begin(), tokens.begin() + n);
  s.n_tokens = n;
  s.n_committed = n / block_size_;
  s.last_hash = h;
  return n;
}

int BlockManager::blocks_needed(int64_t seq, int n_tokens) const {
  const Seq& s = find_seq(seq);
  const int have = (int)s.blocks.size() * block_size_;
  const int need = s.n_tokens + n_tokens - have;
  return need <= 0 ? 0 : (need + block_size_ - 1) / block_size_;
}

bool BlockManager::allocate(int64_t seq, int n_tokens) {
  const int need = blocks_needed(seq, n_tokens);
  if (need > free_blocks()) return false;
  Seq& s = find_seq(seq);
  for (int i = 0; i < need; ++i) s.blocks.push_back(take_block());
  return true;
}

std::vector<int32_t> BlockManager::append(int64_t seq, const std::vector<int32_t>& tokens) {
  Seq& s = find_seq(seq);
  check(blocks_needed(seq, (int)tokens.size()) <= free_blocks(),
        "KV cache is full: " + std::to_string(blocks_needed(seq, (int)tokens.size())) +
            " blocks needed, " + std::to_string(free_blocks()) + " free");
  std::vector<int32_t> slots;
  slots.reserve(tokens.size());
  for (int32_t tok : tokens) {
    const int pos = s.n_tokens;
    if (pos / block_size_ >= (int)s.blocks.size()) s.blocks.push_back(take_block());
    slots.push_back(s.blocks[pos / block_size_] * block_size_ + pos % block_size_);
    s.tokens.push_back(tok);
    s.n_tokens++;
  }
  return slots;
}

void BlockManager::commit(int64_t seq, int n_written) {
  Seq& s = find_seq(seq);
  check(n_written <= s.n_tokens, "commit: " + std::to_string(n_written) +
                                     " tokens written, but the sequence has " +
                                     std::to_string(s.n_tokens));
  const int full = (n_written < 0 ? s.n_tokens : n_written) / block_size_;
  for (int bi = s.n_committed; bi < full; ++bi) {
    const uint64_t h = hash_block(s.last_hash, s.tokens.data() + bi * block_size_, block_size_);
    s.last_hash = h;
    const int32_t b = s.blocks[bi];
    if (!cached_.count(h) && block_hash_[b] == 0) {
      cached_[h] = b;
      block_hash_[b] = h;
      block_tokens_[b].assign(s.tokens.begin() + bi * block_size_,
                              s.tokens.begin() + (bi + 1) * block_size_);
      block_parent_[b] = bi == 0 ? -1 : s.blocks[bi - 1];
    }
  }
  s.n_committed = std::max(s.n_committed, full);
}

void BlockManager::set_token(int64_t seq, int pos, int32_t token) {
  Seq& s = find_seq(seq);
  check(pos >= s.n_committed * block_size_ && pos < s.n_tokens,
        "set_token: position " + std::to_string(pos) + " is not an uncommitted token of sequence " +
            std::to_string(seq) + " (" + std::to_string(s.n_tokens) + " tokens, " +
            std::to_string(s.n_committed * block_size_) + " committed)");
  s.tokens[(size_t)pos] = token;
}

void BlockManager::truncate(int64_t seq, int n_tokens) {
  Seq& s = find_seq(seq);
  check(n_tokens >= s.n_committed * block_size_ && n_tokens <= s.n_tokens,
        "truncate: sequence " + std::to_string(seq) + " cannot go from " +
            std::to_string(s.n_tokens) + " to " + std::to_string(n_tokens) + " tokens (" +
            std::to_string(s.n_committed * block_size_) + " committed)");
  s.tokens.resize((size_t)n_tokens);
  s.n_tokens = n_tokens;
}

}  // namespace perfx
