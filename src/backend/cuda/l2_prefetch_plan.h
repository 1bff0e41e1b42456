// L2 prefetch of the next linear's weight (docs/cuda_linear_notes.md §11): the ranges a kernel
// hands to L2 after its main loop, and which weight the next linear reads, learned from the order
// of the linear calls (the forward pass runs its linears in the same order every step). No CUDA
// headers: the host tests include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace perfx::cuda {

/// Device memory a kernel asks L2 to fetch once its own main loop is done (sm_90
/// cp.async.bulk.prefetch.L2; PTX ISA 8.0): the first bytes of the weight the next linear reads,
/// so its first loads hit L2 while the small kernels in between (RoPE + KV store, attention, the
/// norms) leave DRAM idle. Up to two ranges (a W4 weight's quads and its scale/zero records);
/// pointers 16-byte aligned, sizes multiples of 16; n = 0: none. A hint: the results never change.
struct L2Prefetch {
  const void* p[2] = {nullptr, nullptr};
  uint32_t n[2] = {0, 0};
  bool empty() const { return n[0] == 0 && n[1] == 0; }
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

/// Learns "linear B ran after linear A" from consecutive calls.
class L2PrefetchPlan {
 public:
  /// The linear keyed `key`, whose prefetch ranges are `ranges`, runs now: remembers it as the
  /// successor of the previous call's key, and returns the ranges of the linear that followed
  /// `key` the last time (empty the first time round).
  L2Prefetch next_after(const void* key, const L2Prefetch& ranges) {
    if (last_ != nullptr && last_ != key) next_[last_] = ranges;
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
