// Decode/prefill attention for one query row over a paged KV cache (scaled dot-product attention,
// Vaswani et al. 2017, eq. 1): out = Σ_j softmax_j(scale · q·k_j) · v_j, for keys j < n_keys.
// Key j lives in slot table[j / block_size] * block_size + j % block_size; its K (and V) vector for
// the wanted KV head starts at k_base (v_base) + slot * slot_stride floats.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace perfx::cpu {

/// Where one sequence's keys and values for one KV head live in the paged cache. K and V are fp32
/// (k_base / v_base), or stored as k_dtype / v_dtype (F16 or Q8_0 rows: llama.cpp's
/// --cache-type-k/-v) at k_raw / v_raw, slots k_slot_bytes / v_slot_bytes apart.
struct PagedKv {
  const float* k_base = nullptr;   // fp32 K pool of the layer, already offset to the KV head
  const float* v_base = nullptr;   // fp32 V pool of the layer, already offset to the KV head
  int64_t slot_stride = 0;         // fp32 pools: elements from one slot to the next (n_kv · hd)
  const uint8_t* k_raw = nullptr;  // non-null: K stored as k_dtype (k_base unused), offset likewise
  const uint8_t* v_raw = nullptr;  // non-null: V stored as v_dtype (v_base unused)
  DType k_dtype = DType::F32, v_dtype = DType::F32;
  int64_t k_slot_bytes = 0, v_slot_bytes = 0;
  const int32_t* table = nullptr;  // block table of the sequence
  int block_size = 0;
  const float* k(int j) const { return k_base + slot(j) * slot_stride; }
  const float* v(int j) const { return v_base + slot(j) * slot_stride; }
  int64_t slot(int j) const {
    return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
  }
  /// K (V) of key j as fp32 into dst [hd] (exact for fp16).
  void load_k(int j, float* dst, int hd) const;
  void load_v(int j, float* dst, int hd) const;
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

/// Causal attention for `nt` consecutive tokens of one sequence (positions pos[0] < ... <
/// pos[nt − 1], token i sees keys 0..pos[i]) and the `group` query heads of one KV head: query row
/// (i, g) at q + i·ldq + g·hd, its output at out + i·ldo + g·hd (fp32). Keys and values (fp32 or
/// fp16) are read in blocks of 64 that every row of the tile uses while they sit in L1/L2, with the
/// online softmax (running max and sum rescaled per block; Milakov & Gimelshein 2018, as in
/// FlashAttention, Dao et al. 2022), so no score row is materialised and a prompt's K/V are read
/// once per tile of queries instead of once per query. Equals attention_group_ref per row up to
/// fp32 rounding (exp by the polynomial of avx2_util.h on AVX2). hd: any multiple of 8 up to 256
/// (AVX2), else the portable path.
void attention_tile(const float* q, int64_t ldq, int nt, const int32_t* pos, int group, int hd,
                    float scale, const PagedKv& kv, float* out, int64_t ldo);

}  // namespace perfx::cpu
