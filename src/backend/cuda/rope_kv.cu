// Fused RMSNorm (optional, per head) + RoPE + KV-cache store (rope_kv.cuh).
//
// Grid (n_tokens, ceil(n_heads_total / 8)), 8 warps per CTA, a warp per head of the token, where
// heads are numbered q (0..nq-1), k (nq..nq+nkv-1), v (nq+nkv..nq+2nkv-1). The CTA first computes
// the token's cos/sin table (rot_dim/2 sincosf) in shared memory. A warp holds its head in
// registers (element e = lane + 32 j), reduces sum(x^2) with shuffles for the norm, and each lane
// reads the partner element of its rotation pairs itself (rope_head.cuh, shared with the split-KV
// attention kernel's fused prologue).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_head.cuh"
#include "backend/cuda/rope_kv.cuh"

namespace perfx::cuda {
namespace {

using attn_detail::require;
using rope_detail::HeadRope;
using rope_detail::norm_rope_head;
using rope_detail::rope_cos_sin;
using rope_detail::store_q8;

constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) rope_norm_kv_kernel(const RopeKvArgs a, bool early) {
  PERFX_TRACE(kTrRope, a.k_cache);
  __shared__ float s_cos[kMaxHeadDim / 2], s_sin[kMaxHeadDim / 2];
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
  const HeadRope r{hd,        a.rot_dim, a.interleaved, s_cos, s_sin, is_q ? a.q_norm : a.k_norm,
                   a.norm_eps};
  float x[kPerLane];
  norm_rope_head<T>(src, r, lane, x);
  // Every lane has read its whole head (partners included) before any lane of the warp writes q
  // back in place.
  __syncwarp();
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

PERFX_TRACE_BINDER(trace_bind_rope)

}  // namespace perfx::cuda
