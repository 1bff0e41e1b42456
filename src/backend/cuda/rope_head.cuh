// Device helpers for one attention head's RoPE (+ optional per-head RMSNorm) and its KV-cache
// store, shared by the RoPE + KV store kernel (rope_kv.cu) and the split-KV attention kernel's
// fused prologue (attn_tile.cuh), so both compute the same bits: the formulas are rope_kv.cuh's
// (RoFormer, Su et al. 2021, arXiv 2104.09864; HF modeling_rope_utils.py; GGUF Q8_0 for the int8
// cache) with every product and sum spelled as an explicit fp32 operation (no contraction choice
// left to the compiler).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cvt.cuh"
#include "backend/cuda/pdl.cuh"

namespace perfx::cuda::rope_detail {

/// angle = float(pos) * inv_freq (fp32 product), then accurate sincosf (full range reduction).
__device__ __forceinline__ void rope_cos_sin(int pos, float inv_freq, float af, float* c,
                                             float* s) {
  const float ang = mul_rn(static_cast<float>(pos), inv_freq);
  float sv, cv;
  // nc-ok: sincosf's own constant table (CUDA's math library)
  sincosf(ang, &sv, &cv);
  *c = mul_rn(cv, af);
  *s = mul_rn(sv, af);
}

/// Where one head's RoPE gets its parameters: rot_dim even (0: no rotation), pairs (i, i + rot/2)
/// or, interleaved, (2i, 2i+1); cs / sn [rot/2] the position's cos / sin (already times yarn's
/// attention_factor); w [hd] fp32 per-head RMSNorm weight (Qwen3 q_norm / k_norm) or null.
struct HeadRope {
  int hd, rot;
  bool interleaved;
  const float* cs;
  const float* sn;
  const float* w;
  float eps;
};

/// Warp-collective (all 32 lanes): x[j] = element e = lane + 32 j (e < hd; 0 beyond) of the head
/// at src (T, read through ld_prev) after the optional RMSNorm x / sqrt(mean(x^2) + eps) * w and
/// RoPE: x_a' = x_a c - x_b s, x_b' = x_b c + x_a s for each pair (a, b); dims >= rot unchanged.
/// Each lane reads its pair partners from src itself (no exchange through shared memory).
template <typename T, int kPerLane>
__device__ __forceinline__ void norm_rope_head(const T* src, const HeadRope& r, int lane,
                                               float (&x)[kPerLane]) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + 32 * j;
    x[j] = e < r.hd ? to_f<T>(ld_prev(src + e)) : 0.f;
  }
  float inv = 1.f;
  if (r.w != nullptr) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) ss = fma_rn(x[j], x[j], ss);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    inv = 1.f / sqrtf(ss / static_cast<float>(r.hd) + r.eps);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < r.hd) x[j] = mul_rn(r.w[e], mul_rn(x[j], inv));
    }
  }
  // The partner's value after the norm, exactly as its own lane computed it above.
  auto partner = [&](int p) {
    const float y = to_f<T>(ld_prev(src + p));
    return r.w != nullptr ? mul_rn(r.w[p], mul_rn(y, inv)) : y;
  };
  const int half = r.rot / 2;
  if (half == 0) return;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + 32 * j;
    if (e >= r.rot) continue;
    int i, p;
    bool first;
    if (r.interleaved) {  // pairs (2i, 2i+1)
      i = e >> 1;
      first = (e & 1) == 0;
      p = first ? e + 1 : e - 1;
    } else {  // pairs (i, i + half)
      first = e < half;
      i = first ? e : e - half;
      p = first ? e + half : i;
    }
    const float ps = mul_rn(partner(p), r.sn[i]);
    x[j] = fma_rn(x[j], r.cs[i], first ? -ps : ps);
  }
}

/// Warp-collective: stores a head (x[j] = element lane + 32 j, hd a multiple of 32) as Q8_0
/// blocks of 32: block j is x[j] over the lanes, d = max|x| / 127 (fp16), q = clamp(rint(x * 127 /
/// max|x|), -127, 127). Written to q / d, and also to q2 / d2 when those are non-null.
template <int kPerLane>
__device__ __forceinline__ void store_q8(const float (&x)[kPerLane], int hd, int lane, int8_t* q,
                                         __half* d, int8_t* q2 = nullptr, __half* d2 = nullptr) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (32 * j >= hd) break;
    float amax = fabsf(x[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax > 0.f ? 127.f / amax : 0.f;
    const int8_t v = static_cast<int8_t>(fminf(fmaxf(rintf(mul_rn(x[j], id)), -127.f), 127.f));
    const __half dh = __float2half_rn(amax / 127.f);
    if (q) q[lane + 32 * j] = v;
    if (q2) q2[lane + 32 * j] = v;
    if (lane == 0) {
      if (d) d[j] = dh;
      if (d2) d2[j] = dh;
    }
  }
}

}  // namespace perfx::cuda::rope_detail
