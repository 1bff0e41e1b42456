// Decode/prefill attention for one query row over a paged KV cache (scaled dot-product attention,
// Vaswani et al. 2017, eq. 1): out = Σ_j softmax_j(scale · q·k_j) · v_j, for keys j < n_keys.
// Key j lives in slot table[j / block_size] * block_size + j % block_size; its K (and V) vector for
// the wanted KV head starts at k_base (v_base) + slot * slot_stride floats.
#pragma once

#include <cstdint>

namespace perfx::cpu {

/// Where one sequence's keys and values for one KV head live in the paged cache.
struct PagedKv {
  const float* k_base = nullptr;   // K pool of the layer, already offset to the KV head
  const float* v_base = nullptr;   // V pool of the layer, already offset to the KV head
  int64_t slot_stride = 0;         // floats from one slot to the next (n_kv_heads · head_dim)
  const int32_t* table = nullptr;  // block table of the sequence
  int block_size = 0;
  const float* k(int j) const { return k_base + slot(j) * slot_stride; }
  const float* v(int j) const { return v_base + slot(j) * slot_stride; }
  int64_t slot(int j) const {
    return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
  }
};

/// Plain reference for the `group` query heads that share one KV head (GQA; Ainslie et al. 2023):
/// q, out fp32 [group, hd] (heads contiguous); scores fp32 scratch [group, n_keys] (overwritten
/// with the attention probabilities). n_keys >= 1, group >= 1. fp32, max-subtracted softmax.
void attention_group_ref(const float* q, int group, int hd, float scale, int n_keys,
                         const PagedKv& kv, float* scores, float* out);

/// Same contract, fastest kernel for this CPU: AVX2 + FMA when hd is a multiple of 8 and at most
/// 128 (else the reference). Keys and values are read in blocks of 64 that stay in L1 while every
/// head of the group uses them, so a GQA group reads its KV head once instead of `group` times.
/// Differs from the reference only by summation order.
void attention_group(const float* q, int group, int hd, float scale, int n_keys, const PagedKv& kv,
                     float* scores, float* out);

}  // namespace perfx::cpu
