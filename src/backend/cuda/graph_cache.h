// The CUDA backend's cache of instantiated decode-step graphs (host only, no CUDA types): at most
// `cap` entries; a lookup marks its entry the most recently used, and an insertion into a full
// cache evicts the least recently used entry — a server whose batch shapes outnumber the cap
// keeps its common shapes' graphs instead of dropping every graph at once, as the cache did
// before the thirty-first session. The caller releases evicted values (cudaGraphExecDestroy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace perfx::cuda {

template <class Key, class Value>
class GraphCache {
 public:
  /// cap: the most entries held (≥ 1).
  explicit GraphCache(size_t cap) : cap_(cap < 1 ? 1 : cap) {}

  /// The value for `key`, marked the most recently used; nullptr when absent.
  Value* find(const Key& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    it->second.used = ++clock_;
    return &it->second.value;
  }
  /// Whether `key` is held (its recency unchanged).
  bool contains(const Key& key) const { return map_.count(key) != 0; }

  /// Holds `value` for `key` as the most recently used entry. Returns the value it displaced: the
  /// key's previous value, or, when the cache was full, the least recently used entry's.
  std::optional<Value> insert(const Key& key, Value value) {
    std::optional<Value> out;
    auto it = map_.find(key);
    if (it != map_.end()) {
      out = std::move(it->second.value);
      map_.erase(it);
    } else if (map_.size() >= cap_) {
      auto lru = map_.begin();
      for (auto i = map_.begin(); i != map_.end(); ++i)
        if (i->second.used < lru->second.used) lru = i;
      out = std::move(lru->second.value);
      map_.erase(lru);
    }
    map_.emplace(key, Entry{std::move(value), ++clock_});
    return out;
  }

  /// Removes every entry whose key satisfies `pred`, passing each value to `release`.
  template <class Pred, class Release>
  void erase_if(Pred pred, Release release) {
    for (auto it = map_.begin(); it != map_.end();) {
      if (pred(it->first)) {
        release(it->second.value);
        it = map_.erase(it);
      } else {
        ++it;
      }
    }
  }
  /// Removes every entry, passing each value to `release`.
  template <class Release>
  void clear(Release release) {
    erase_if([](const Key&) { return true; }, release);
  }

  size_t size() const { return map_.size(); }
  size_t cap() const { return cap_; }

 private:
  struct Entry {
    Value value;
    uint64_t used;  // clock_ at the last find or insert
  };
  std::map<Key, Entry> map_;
  uint64_t clock_ = 0;
  size_t cap_;
};

}  // namespace perfx::cuda
