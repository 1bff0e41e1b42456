// Fused per-token pre-attention step on CUDA: optional per-head RMSNorm of q and k (Qwen3
// q_norm/k_norm), rotary position embedding of q (in place) and k (RoFormer, Su et al. 2021,
// arXiv 2104.09864; HF modeling_rope_utils.py for the frequency table and yarn's attention_factor),
// and the store of rotated k and of v into the paged KV cache (PagedAttention, arXiv 2309.06180).
// For decode the same work runs inside the split-KV attention kernel instead (attention.cuh,
// PagedAttentionArgs::rope; the formulas shared through rope_head.cuh). Host plain C++ API:
// includable from .cpp files built by the host compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/attn_common.cuh"

namespace perfx::cuda {

/// Arguments of rope_norm_kv_store(). Sizes in elements; all pointers are device pointers.
///  * q [n_tokens, n_q_heads * head_dim] row stride ldq, rotated (and normed) IN PLACE.
///  * k, v [n_tokens, n_kv_heads * head_dim] row strides ldk, ldv: read only (k is not written
///    back; its rotated values go to the cache). Typically q, k, v are column views of the fused
///    QKV output [n_tokens, (n_q_heads + 2 n_kv_heads) * head_dim].
///  * k_cache, v_cache: the layer's pools [n_slots, n_kv_heads, head_dim] (slot-major, as in
///    PagedAttentionArgs); token t's K/V go to slot slots[t]. Tokens whose slot is < 0 or >=
///    n_slots are not stored (their q is still rotated): -1 marks padding tokens.
///  * positions [n_tokens] int32: the token's absolute position.
///  * RoPE: for pair i < rot_dim / 2, angle = float(position) * inv_freq[i] (an fp32 product, as HF
///    computes the frequencies), c = cos(angle) * attention_factor, s = sin(angle) *
///    attention_factor (accurate sincosf, not the fast intrinsics). Pairs are (i, i + rot_dim/2)
///    (HF rotate_half) or, when interleaved, (2i, 2i+1) (GGUF/Meta). x_a' = x_a c - x_b s,
///    x_b' = x_b c + x_a s. Dims >= rot_dim are left as they are (partial rotary). rot_dim = 0
///    disables RoPE (inv_freq may then be null).
///  * Norm (before RoPE): when q_norm (k_norm) is non-null, each q (k) head becomes
///    x / sqrt(mean(x^2) + norm_eps) * w with w fp32 [head_dim], computed in fp32.
///  * kv_q8 (a q8_0 cache, PagedAttentionArgs::kv_q8): the caches are int8 and each 32 values
///    of a head get an fp16 scale in k_scale / v_scale [n_slots * n_kv_heads, q8_scale_stride]:
///    d = max|x| / 127, q = clamp(rint(x * 127 / max|x|), -127, 127) from the fp32 values (GGUF
///    Q8_0's rule, the CPU cache's too); head_dim must be a multiple of 32.
/// Everything is computed in fp32 from the T inputs and rounded to T once.
struct RopeKvArgs {
  AttnDtype dtype = AttnDtype::kBF16;
  bool kv_q8 = false;
  void* k_scale = nullptr;  // kv_q8: fp16 [n_slots * n_kv_heads, q8_scale_stride(head_dim)]
  void* v_scale = nullptr;
  void* q = nullptr;
  int64_t ldq = 0;
  const void* k = nullptr;
  int64_t ldk = 0;
  const void* v = nullptr;
  int64_t ldv = 0;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t n_slots = 0;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  int n_tokens = 0;
  int n_q_heads = 0, n_kv_heads = 0;
  int head_dim = 0;  // even, <= 256
  int rot_dim = 0;   // even, <= head_dim
  bool interleaved = false;
  const float* inv_freq = nullptr;  // [rot_dim / 2]
  float attention_factor = 1.f;
  const float* q_norm = nullptr;  // [head_dim] or null
  const float* k_norm = nullptr;  // [head_dim] or null
  float norm_eps = 1e-6f;
};

/// One launch: grid (n_tokens, ceil((n_q_heads + 2 n_kv_heads) / 8)), a warp per head. No
/// allocation or synchronization (graph-capturable). Throws std::invalid_argument on bad arguments
/// (head_dim odd or > 256, rot_dim odd or > head_dim, null pointers) and std::runtime_error if the
/// launch fails. q must not overlap k, v or the caches.
void rope_norm_kv_store(const RopeKvArgs& a, cudaStream_t stream);

/// The cos/sin table the kernel uses, for tests: cos_out/sin_out [n, half] fp32 (device) with
/// angle = float(positions[t]) * inv_freq[i], values multiplied by attention_factor.
void rope_cos_sin_table(const int32_t* positions, int n, const float* inv_freq, int half,
                        float attention_factor, float* cos_out, float* sin_out,
                        cudaStream_t stream);

}  // namespace perfx::cuda
