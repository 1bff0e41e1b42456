// Fused RMSNorm (optional, per head) + RoPE + KV-cache store (rope_kv.cuh).
//
// Grid (n_tokens, ceil(n_heads_total / 8)), 8 warps per CTA, a warp per head of the token, where
// heads are numbered q (0..nq-1), k (nq..nq+nkv-1), v (nq+nkv..nq+2nkv-1). The CTA first computes
// the token's cos/sin table (rot_dim/2 sincosf) in shared memory. A warp holds its head in
// registers (element e = lane + 32 j), reduces sum(x^2) with shuffles for the norm, and stages the
// normed head in shared memory so that each lane can read the partner element of its rotation pair.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_kv.cuh"

namespace perfx::cuda {
namespace {

using attn_detail::require;

constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;

template <typename T>
__device__ __forceinline__ float to_f(T x);
template <>
__device__ __forceinline__ float to_f<__half>(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ __half from_f<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// angle = float(pos) * inv_freq (fp32 product), then accurate sincosf (full range reduction).
__device__ __forceinline__ void rope_cos_sin(int pos, float inv_freq, float af, float* c,
                                             float* s) {
  const float ang = static_cast<float>(pos) * inv_freq;
  float sv, cv;
  sincosf(ang, &sv, &cv);
  *c = cv * af;
  *s = sv * af;
}

/// Stores a warp's head (element e = lane + 32 j in x[j]) as Q8_0 blocks: block j is x[j] over
/// the 32 lanes, so its max|x| is a warp reduction.
__device__ __forceinline__ void store_q8(const float (&x)[kPerLane], int hd, int lane, int8_t* q,
                                         __half* d) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (32 * j >= hd) break;
    float amax = fabsf(x[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax > 0.f ? 127.f / amax : 0.f;
    q[lane + 32 * j] = static_cast<int8_t>(fminf(fmaxf(rintf(x[j] * id), -127.f), 127.f));
    if (lane == 0) d[j] = __float2half_rn(amax / 127.f);
  }
}

/// A load of the previous kernel's output (q, k, v): the CPU emulator checks it follows pdl_wait.
template <typename U>
__device__ __forceinline__ U ld_prev(const U* p) {
#if defined(PERFX_ATTN_EMULATION)
  perfx_emu_check_read(p, sizeof(U));
#endif
  return *p;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) rope_norm_kv_kernel(const RopeKvArgs a, bool early) {
  __shared__ float s_cos[kMaxHeadDim / 2], s_sin[kMaxHeadDim / 2];
  __shared__ float s_x[kWarps][kMaxHeadDim];
  // Before the PDL wait (early: pdl_early_reads()): the token's position (the host-uploaded batch
  // layout, pdl.cuh) and its cos/sin table; q, k, v (the QKV projection's output) and the cache
  // after it.
  pdl_trigger();
  if (!early) pdl_wait();
  const int t = blockIdx.x;
  const int half = a.rot_dim / 2;
  const int pos = a.positions[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x)
    rope_cos_sin(pos, a.inv_freq[i], a.attention_factor, &s_cos[i], &s_sin[i]);
  __syncthreads();
  if (early) pdl_wait();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nq = a.n_q_heads, nkv = a.n_kv_heads, hd = a.head_dim;
  const int head = blockIdx.y * kWarps + warp;
  if (head >= nq + 2 * nkv) return;
  const int64_t slot = a.slots[t];
  const bool store = slot >= 0 && slot < a.n_slots;

  if (head >= nq + nkv) {  // v: plain copy into the cache
    if (!store) return;
    const int vh = head - nq - nkv;
    const T* src = static_cast<const T*>(a.v) + t * a.ldv + static_cast<int64_t>(vh) * hd;
    const int64_t at = (slot * nkv + vh) * hd;
    if (a.kv_q8) {
      float x[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int e = lane + 32 * j;
        x[j] = e < hd ? to_f<T>(ld_prev(src + e)) : 0.f;
      }
      store_q8(x, hd, lane, static_cast<int8_t*>(a.v_cache) + at,
               static_cast<__half*>(a.v_scale) + (slot * nkv + vh) * q8_scale_stride(hd));
      return;
    }
    T* dst = static_cast<T*>(a.v_cache) + at;
    for (int e = lane; e < hd; e += 32) dst[e] = ld_prev(src + e);
    return;
  }
  const bool is_q = head < nq;
  if (!is_q && !store) return;
  const int kh = head - nq;
  const T* src = is_q ? static_cast<const T*>(a.q) + t * a.ldq + static_cast<int64_t>(head) * hd
                      : static_cast<const T*>(a.k) + t * a.ldk + static_cast<int64_t>(kh) * hd;
  T* dst = is_q ? static_cast<T*>(a.q) + t * a.ldq + static_cast<int64_t>(head) * hd
                : static_cast<T*>(a.k_cache) + (slot * nkv + kh) * hd;
  const float* w = is_q ? a.q_norm : a.k_norm;

  float x[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + 32 * j;
    x[j] = e < hd ? to_f<T>(ld_prev(src + e)) : 0.f;
  }
  if (w != nullptr) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) ss += x[j] * x[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.f / sqrtf(ss / static_cast<float>(hd) + a.norm_eps);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < hd) x[j] = w[e] * (x[j] * inv);
    }
  }
  if (half > 0) {
    float* sx = s_x[warp];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < hd) sx[e] = x[j];
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < a.rot_dim) {
        if (a.interleaved) {  // pairs (2i, 2i+1)
          const int i = e >> 1;
          x[j] = (e & 1) ? x[j] * s_cos[i] + sx[e - 1] * s_sin[i]
                         : x[j] * s_cos[i] - sx[e + 1] * s_sin[i];
        } else if (e < half) {  // pairs (i, i + half): first element
          x[j] = x[j] * s_cos[e] - sx[e + half] * s_sin[e];
        } else {  // second element
          const int i = e - half;
          x[j] = x[j] * s_cos[i] + sx[i] * s_sin[i];
        }
      }
    }
  }
  if (!is_q && a.kv_q8) {
    const int64_t at = (slot * nkv + kh) * hd;
    store_q8(x, hd, lane, static_cast<int8_t*>(a.k_cache) + at,
             static_cast<__half*>(a.k_scale) + (slot * nkv + kh) * q8_scale_stride(hd));
    return;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + 32 * j;
    if (e < hd) dst[e] = from_f<T>(x[j]);
  }
}

__global__ void cos_sin_table_kernel(const int32_t* positions, int n, const float* inv_freq,
                                     int half, float af, float* cos_out, float* sin_out) {
  pdl_enter();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * half) return;
  const int t = static_cast<int>(idx / half), i = static_cast<int>(idx % half);
  rope_cos_sin(positions[t], inv_freq[i], af, &cos_out[idx], &sin_out[idx]);
}

}  // namespace

#if !defined(PERFX_ATTN_EMULATION)  // the CPU emulator (tests/cuda) launches the kernel itself

void rope_norm_kv_store(const RopeKvArgs& a, cudaStream_t stream) {
  const std::string f = "rope_norm_kv_store: ";
  require(a.dtype == AttnDtype::kF16 || a.dtype == AttnDtype::kBF16, f + "bad dtype");
  require(a.n_tokens >= 0, f + "n_tokens < 0");
  require(a.head_dim >= 2 && a.head_dim % 2 == 0 && a.head_dim <= kMaxHeadDim,
          f + "head_dim must be even and <= 256");
  require(a.rot_dim >= 0 && a.rot_dim % 2 == 0 && a.rot_dim <= a.head_dim,
          f + "rot_dim must be even and <= head_dim");
  require(a.n_q_heads >= 0 && a.n_kv_heads >= 0, f + "negative head count");
  if (a.n_tokens == 0 || a.n_q_heads + a.n_kv_heads == 0) return;
  require(a.positions && a.slots, f + "null positions/slots");
  require(a.n_q_heads == 0 || a.q, f + "null q");
  require(a.n_kv_heads == 0 || (a.k && a.v && a.k_cache && a.v_cache), f + "null k/v/cache");
  require(a.rot_dim == 0 || a.inv_freq, f + "null inv_freq");
  require(!a.kv_q8 || a.n_kv_heads == 0 || (a.head_dim % 32 == 0 && a.k_scale && a.v_scale),
          f + "a q8_0 cache needs head_dim a multiple of 32 and both scale arrays");
  const int64_t hd = a.head_dim;
  require(a.n_q_heads == 0 || a.ldq >= a.n_q_heads * hd, f + "ldq < n_q_heads * head_dim");
  require(a.n_kv_heads == 0 || (a.ldk >= a.n_kv_heads * hd && a.ldv >= a.n_kv_heads * hd),
          f + "ldk/ldv < n_kv_heads * head_dim");
  const int n_heads = a.n_q_heads + 2 * a.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(a.n_tokens),
                  static_cast<unsigned>((n_heads + kWarps - 1) / kWarps));
  require(grid.y <= 65535u, f + "too many heads");
  if (a.dtype == AttnDtype::kF16)
    launch_pdl(rope_norm_kv_kernel<__half>, grid, dim3(kWarps * 32), 0, stream, a,
               pdl_early_reads());
  else
    launch_pdl(rope_norm_kv_kernel<__nv_bfloat16>, grid, dim3(kWarps * 32), 0, stream, a,
               pdl_early_reads());
  ATTN_CUDA_CHECK(cudaGetLastError());
}

void rope_cos_sin_table(const int32_t* positions, int n, const float* inv_freq, int half,
                        float attention_factor, float* cos_out, float* sin_out,
                        cudaStream_t stream) {
  require(n >= 0 && half >= 0, "rope_cos_sin_table: negative size");
  const int64_t total = static_cast<int64_t>(n) * half;
  if (total == 0) return;
  const int threads = 256;
  launch_pdl(cos_sin_table_kernel, dim3(static_cast<unsigned>((total + threads - 1) / threads)),
             dim3(threads), 0, stream, positions, n, inv_freq, half, attention_factor, cos_out,
             sin_out);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

#endif  // !PERFX_ATTN_EMULATION

}  // namespace perfx::cuda
