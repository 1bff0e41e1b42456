// L2 warming of the next linear's weight (docs/cuda_linear_notes.md §11, §26): the ranges a GEMV
// reads into L2 for the linear after it, and which weight the next linear reads, learned from the
// order of the linear calls (the forward pass runs its linears in the same order every step). No
// CUDA headers: the host tests include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace perfx::cuda {

/// Device memory a GEMV reads into L2 for the next linear (frag::l2_warm_share: cp.async.ca
/// copies into a scratch slot, as the prefetch instructions left nothing in L2, §26): the first
/// bytes of the weight the next linear reads, so its first loads hit L2. Read before the GEMV's
/// PDL wait, while its predecessor (attention) runs and leaves DRAM idle. Up to two ranges (a W4
/// weight's quads and its scale/zero records); pointers 16-byte aligned, sizes multiples of 16; n =
/// 0: none. The results never change.
struct L2Prefetch {
  const void* p[2] = {nullptr, nullptr};
  uint32_t n[2] = {0, 0};
  bool empty() const { return n[0] == 0 && n[1] == 0; }
  /// Both ranges 16-byte aligned with sizes multiples of 16 (what the 16-byte copies need).
  bool aligned() const {
    for (int r = 0; r < 2; ++r)
      if (n[r] != 0 && ((uintptr_t)p[r] % 16 != 0 || n[r] % 16 != 0)) return false;
    return true;
  }
  bool operator==(const L2Prefetch& o) const {
    return p[0] == o.p[0] && p[1] == o.p[1] && n[0] == o.n[0] && n[1] == o.n[1];
  }
};

/// The first `cap` bytes of range 0 (a weight's main array) and the same share of range 1 (its
/// scale records, laid out in the same row-block order), each rounded down to 16 bytes; pointers
/// must be 16-byte aligned (device allocations are). cap 0 or n0 0: empty.
inline L2Prefetch l2_prefix(const void* p0, size_t n0, const void* p1, size_t n1, size_t cap) {
  L2Prefetch r;
  if (cap == 0 || n0 == 0) return r;
  const size_t a = std::min<size_t>({n0, cap, UINT32_MAX}) & ~size_t(15);
  const size_t b =
      p1 == nullptr
          ? 0
          : std::min<size_t>({n1, (size_t)((double)n1 * a / n0), UINT32_MAX}) & ~size_t(15);
  r.p[0] = p0;
  r.n[0] = (uint32_t)a;
  r.p[1] = b > 0 ? p1 : nullptr;
  r.n[1] = (uint32_t)b;
  return r;
}

/// The backend's warming rule (§26), as pure functions. A weight is offered to the linear before
/// it when warming is on (cap > 0) and, under the default size rule (auto_size), the weight is at
/// most twice the cap (TinyLlama's gate|up gained; 7B's, 45.7 MiB, lost at every cap).
inline bool l2_warm_offers(size_t weight_bytes, size_t cap, bool auto_size) {
  return cap > 0 && (!auto_size || weight_bytes <= 2 * cap);
}
/// A linear warms its successor only right after attention (its PDL wait spans attention) and for
/// one token (at batch 8, as on 7B, attention's many CTAs lost more to the traffic).
inline bool l2_warm_applies(bool after_attention, int M) {
  return after_attention && M == 1;
}

/// Learns "linear B ran after linear A" from consecutive calls.
class L2PrefetchPlan {
 public:
  /// The linear keyed `key`, whose prefetch ranges are `ranges`, runs now: remembers it as the
  /// successor of the previous call's key, and returns the ranges of the linear that followed
  /// `key` the last time (empty the first time round). *changed (if given) is set when the
  /// previous key's successor was new or different (work captured with the old one is stale).
  L2Prefetch next_after(const void* key, const L2Prefetch& ranges, bool* changed = nullptr) {
    bool differs = false;
    if (last_ != nullptr && last_ != key) {
      auto [it, fresh] = next_.try_emplace(last_, ranges);
      differs = fresh || !(it->second == ranges);
      it->second = ranges;
    }
    if (changed) *changed = differs;
    last_ = key;
    const auto it = next_.find(key);
    return it == next_.end() ? L2Prefetch{} : it->second;
  }
  /// Forgets everything (call when a weight is freed: a key may be reused by a new weight).
  void clear() {
    next_.clear();
    last_ = nullptr;
  }

 private:
  std::unordered_map<const void*, L2Prefetch> next_;
  const void* last_ = nullptr;
};

}  // namespace perfx::cuda
