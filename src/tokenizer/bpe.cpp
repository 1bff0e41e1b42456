// Rank-based BPE over a doubly linked list of symbols with a min-heap of candidate merges.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "perfx/status.h"
#include "tokenizer/unicode.h"

namespace perfx::tok {

BpeModel::BpeModel(std::shared_ptr<const Vocab> vocab, Options opts)
    : vocab_(std::move(vocab)), opts_(std::move(opts)) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = vocab_->find(name);
  }
  table_.resize(1024);
}

void BpeModel::reserve_merges(size_t n) {
  size_t cap = 1024;
  while (cap < n + n / 2) cap <<= 1;
  if (cap > table_.size()) {
    std::vector<Slot> old;
    old.swap(table_);
    table_.resize(cap);
    for (const Slot& s : old)
      if (s.key) insert(s.key, s.rank, s.id);
  }
}

namespace {
inline size_t hash_key(uint64_t k, size_t mask) {
  return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}
}  // namespace

void BpeModel::insert(uint64_t key, int32_t rank, int32_t id) {
  const size_t mask = table_.size() - 1;
  for (size_t i = hash_key(key, mask);; i = (i + 1) & mask) {
    if (table_[i].key == key) return;  // keep the first (lowest-rank) rule for a pair
    if (table_[i].key == 0) {
      table_[i] = {key, rank, id};
      return;
    }
  }
}

void BpeModel::grow() {
  reserve_merges(table_.size());
}

const BpeModel::Slot* BpeModel::lookup(int32_t a, int32_t b) const {
  const uint64_t key = pair_key(a, b);
  const size_t mask = table_.size() - 1;
  for (size_t i = hash_key(key, mask);; i = (i + 1) & mask) {
    const Slot& s = table_[i];
    if (s.key == key) return &s;
    if (s.key == 0) return nullptr;
  }
}

void BpeModel::add_merge(std::string_view a, std::string_view b) {
  const int32_t ia = vocab_->find(a), ib = vocab_->find(b);
  std::string& merged = merge_buf_;
  merged.assign(a);
  const size_t skip =
      (!opts_.continuing_subword_prefix.empty() &&
       b.substr(0, opts_.continuing_subword_prefix.size()) == opts_.continuing_subword_prefix)
          ? opts_.continuing_subword_prefix.size()
          : 0;
  merged.append(b.substr(skip));
  const int32_t im = vocab_->find(merged);
  if (ia < 0 || ib < 0 || im < 0) {
    throw Error("tokenizer: merge rule #" + std::to_string(n_merges_) + " '" + std::string(a) +
                " " + std::string(b) + "' uses a token that is not in the vocab");
  }
  if ((n_merges_ + 1) * 3 > table_.size() * 2) grow();
  insert(pair_key(ia, ib), static_cast<int32_t>(n_merges_), im);
  ++n_merges_;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > kCacheMaxWordBytes) {
    encode_uncached(word, out);
    return;
  }
  const size_t h = StringHash{}(word);
  CacheShard& shard = cache_[h % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  encode_uncached(word, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kCacheShardEntries) shard.map.clear();
  shard.map.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (opts_.ignore_merges) {
    const int32_t id = vocab_->find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  auto add_sym = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1});
    if (n > 0) syms[n - 1].next = n;
  };

  // Initial symbols: one per character (with prefix/suffix decoration), else bytes, else unk.
  int32_t pending_unk = 0;  // number of unk symbols waiting (fused into one when fuse_unk)
  auto flush_unk = [&] {
    if (pending_unk > 0) add_sym(opts_.unk_id);
    pending_unk = 0;
  };
  std::string buf;
  size_t pos = 0;
  bool first = true;
  while (pos < word.size()) {
    const size_t len = std::min(utf8_char_len(static_cast<uint8_t>(word[pos])), word.size() - pos);
    std::string_view ch = word.substr(pos, len);
    pos += len;
    const bool last = pos >= word.size();
    std::string_view s = ch;
    if ((!first && !opts_.continuing_subword_prefix.empty()) ||
        (last && !opts_.end_of_word_suffix.empty())) {
      buf.clear();
      if (!first) buf += opts_.continuing_subword_prefix;
      buf += ch;
      if (last) buf += opts_.end_of_word_suffix;
      s = buf;
    }
    first = false;
    const int32_t id = vocab_->find(s);
    if (id >= 0) {
      flush_unk();
      add_sym(id);
      continue;
    }
    if (opts_.byte_fallback) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        flush_unk();
        for (char c : s) add_sym(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (opts_.unk_id >= 0) {
      if (!opts_.fuse_unk) flush_unk();
      pending_unk = 1;
    }
  }
  flush_unk();

  // Merge loop: always apply the lowest-rank pair; ties go to the leftmost pair.
  struct Cand {
    int32_t rank, pos, left, right, merged;
  };
  struct Cmp {
    bool operator()(const Cand& x, const Cand& y) const {
      return x.rank > y.rank || (x.rank == y.rank && x.pos > y.pos);
    }
  };
  std::vector<Cand> heap_storage;
  heap_storage.reserve(syms.size());
  std::priority_queue<Cand, std::vector<Cand>, Cmp> heap(Cmp{}, std::move(heap_storage));
  auto consider = [&](int32_t i) {
    if (i < 0) return;
    const int32_t j = syms[i].next;
    if (j < 0) return;
    if (const Slot* s = lookup(syms[i].id, syms[j].id))
      heap.push({s->rank, i, syms[i].id, syms[j].id, s->id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& l = syms[c.pos];
    if (l.id != c.left || l.next < 0) continue;  // stale: the left symbol changed
    Sym& r = syms[l.next];
    if (r.id != c.right) continue;  // stale: the right neighbour changed
    l.id = c.merged;
    const int32_t after = r.next;
    r.id = -1;
    l.next = after;
    if (after >= 0) syms[after].prev = c.pos;
    consider(l.prev);
    consider(c.pos);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace perfx::tok
