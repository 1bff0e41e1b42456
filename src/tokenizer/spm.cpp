// Score-based BPE over a linked list of text spans with a max-heap of candidate bigrams.
#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/unicode.h"

namespace perfx::tok {

SpmModel::SpmModel(std::shared_ptr<const Vocab> vocab, std::vector<float> scores, int32_t unk_id)
    : vocab_(std::move(vocab)), scores_(std::move(scores)), unk_id_(unk_id) {
  scores_.resize(vocab_->size(), 0.0f);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = vocab_->find(name);
  }
}

void SpmModel::encode_word(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  struct Sym {
    uint32_t off, len;  // len 0 = merged away
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min(utf8_char_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), n - 1, -1});
    if (n > 0) syms[n - 1].next = n;
    pos += len;
  }

  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t len;
  };
  struct Cmp {  // max score first, then leftmost
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  std::priority_queue<Bigram, std::vector<Bigram>, Cmp> heap;
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = syms[l].len + syms[r].len;
    const int32_t id = vocab_->find(text.substr(syms[l].off, len));
    if (id < 0) return;
    heap.push({scores_[id], l, r, len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) consider(i - 1, i);
  while (!heap.empty()) {
    const Bigram bg = heap.top();
    heap.pop();
    Sym& l = syms[bg.left];
    Sym& r = syms[bg.right];
    // Stale when either side was merged since the bigram was queued.
    if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len || l.next != bg.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = bg.left;
    consider(l.prev, bg.left);
    consider(bg.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    std::string_view piece = text.substr(syms[i].off, syms[i].len);
    const int32_t id = vocab_->find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    bool all = true;
    for (char c : piece) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (char c : piece) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);
    }
  }
}

}  // namespace perfx::tok
