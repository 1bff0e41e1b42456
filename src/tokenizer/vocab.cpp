// Arena + open-addressing (linear probing) token table.
#include "tokenizer/vocab.h"

#include <cstring>

#include "perfx/status.h"

namespace perfx::tok {

void Vocab::reserve(size_t n) {
  spans_.reserve(n);
  arena_.reserve(n * 8);
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap > slots_.size()) rehash(cap);
}

void Vocab::rehash(size_t capacity) {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(capacity, Slot{});
  const size_t mask = capacity - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = hash(text(s.id)) & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

int32_t Vocab::find(std::string_view t) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash(t);
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return -1;
    if (s.tag == tag) {
      const Span& sp = spans_[s.id];
      if (sp.len == t.size() && std::memcmp(arena_.data() + sp.off, t.data(), t.size()) == 0)
        return s.id;
    }
  }
}

void Vocab::set(int32_t id, std::string_view t) {
  if (id < 0) throw Error("tokenizer: negative token id");
  if (id > kMaxTokenId)
    throw Error("tokenizer: token id " + std::to_string(id) + " is too large (at most " +
                std::to_string(kMaxTokenId) + ")");
  if (arena_.size() + t.size() > UINT32_MAX) throw Error("tokenizer: vocabulary too large");
  if (id >= size()) spans_.resize(static_cast<size_t>(id) + 1);
  if ((used_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 1024 : slots_.size() * 2);
  const uint64_t h = hash(t);
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  for (;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.id < 0) break;
    if (s.tag == tag && text(s.id) == t) {
      // Same text again: the later id wins the lookup; both ids keep their text.
      spans_[id] = spans_[s.id];
      s.id = id;
      return;
    }
  }
  spans_[id] = {static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(t.size())};
  arena_.append(t);
  slots_[i] = {tag, id};
  ++used_;
}

}  // namespace perfx::tok
