// The CUDA backend's small kernels (see kernels.h for the contracts).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "backend/cuda/attn_common.cuh"
#include "backend/cuda/cvt.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/logit_check.cuh"
#include "backend/cuda/norm_kernels.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/swiglu.cuh"

namespace perfx::cuda {
namespace {

/// out[r, i] = swiglu(g, u): stacked (g = gu[r, i], u = gu[r, I + i]) or, kInterleaved, in the
/// order of a W4RowOrder::kInterleave8 weight (g in column 16·(i / 8) + i % 8, u 8 columns later),
/// plus bias [2I] (gate's, then up's; null: none) in fp32.
template <typename T, bool kInterleaved>
__global__ void silu_mul_kernel(const T* gu, int64_t ldg, int64_t I, const float* __restrict__ bias,
                                T* __restrict__ out, int64_t ldo) {
  pdl_enter();
  const int64_t row = blockIdx.y;
  const T* g = gu + row * ldg;
  T* o = out + row * ldo;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < I;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = kInterleaved ? 16 * (i / 8) + i % 8 : i;
    float a = to_f(g[c]), u = to_f(g[kInterleaved ? c + 8 : I + i]);
    if (bias != nullptr) {
      a += bias[i];      // nc-ok: bias, a weight, immutable
      u += bias[I + i];  // nc-ok: bias
    }
    o[i] = from_f<T>(swiglu(a, u));
  }
}

/// Copies rows of `cols` elements of 2 bytes: 16-byte chunks when everything is 16-byte aligned.
/// src is the embedding table or the activations of the kernel before (gather_rows), so it and
/// idx are read coherently (pdl.cuh): no __restrict__.
__global__ void copy_rows_kernel(const uint16_t* src, int64_t lds, const int32_t* idx, int64_t cols,
                                 uint16_t* __restrict__ dst, int64_t ldd, bool vec) {
  PERFX_TRACE(kTrEmbed, src);
  pdl_enter();
  const int64_t r = blockIdx.x;
  const int64_t s = idx ? idx[r] : r;
  uint16_t* b = dst + r * ldd;
  if (s < 0) {  // a fed id of a row whose logits were broken (a sampling kernel's −1): zeros
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) b[i] = 0;
    return;
  }
  const uint16_t* a = src + s * lds;
  if (vec) {
    const uint4* a4 = reinterpret_cast<const uint4*>(a);
    uint4* b4 = reinterpret_cast<uint4*>(b);
    for (int64_t i = threadIdx.x; i < cols / 8; i += blockDim.x) b4[i] = a4[i];
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) b[i] = a[i];
  }
}

template <typename T>
__global__ void add_bias_kernel(T* __restrict__ y, int64_t ldy, const float* __restrict__ bias,
                                int64_t cols) {
  pdl_enter();
  T* yr = y + (int64_t)blockIdx.y * ldy;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
       c += (int64_t)gridDim.x * blockDim.x)
    // nc-ok: bias: a weight, immutable
    yr[c] = from_f<T>(to_f(yr[c]) + bias[c]);
}
__global__ void add_bias_f32_kernel(float* __restrict__ y, int64_t ldy,
                                    const float* __restrict__ bias, int64_t cols) {
  pdl_enter();
  float* yr = y + (int64_t)blockIdx.y * ldy;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
       c += (int64_t)gridDim.x * blockDim.x)
    // nc-ok: bias: a weight, immutable
    yr[c] += bias[c];
}

__global__ void penalties_kernel(float* __restrict__ logits, int64_t ld,
                                 const PenaltyEntry* __restrict__ e, int n) {
  pdl_enter();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const PenaltyEntry d = e[i];  // nc-ok: the entries are uploaded before the launch
  float& l = logits[(int64_t)d.row * ld + d.id];
  // A logit the request's own penalty overflows to +inf stays the largest float, after each of the
  // two steps as in the reference sampler; the model's own +inf or NaN stays, for the sampling
  // kernels to report.
  const bool from_model_ok = l < INFINITY;  // finite or −inf
  float v = l;
  if (d.repeat != 1.0f) {
    v = v > 0.0f ? v / d.repeat : v * d.repeat;
    if (from_model_ok && v > FLT_MAX) v = FLT_MAX;
  }
  v -= d.subtract;
  if (from_model_ok && v > FLT_MAX) v = FLT_MAX;
  l = v;
}

/// (value, index) max with the lowest index on ties; NaN loses to anything.
__device__ __forceinline__ void better(float& bv, int& bi, float v, int i) {
  if (v > bv || (v == bv && i < bi) || (bv != bv && v == v)) {
    bv = v;
    bi = i;
  }
}

__global__ void argmax_kernel(const float* logits, int64_t ld, const int32_t* __restrict__ rows,
                              int vocab, int32_t* __restrict__ out) {
  PERFX_TRACE(kTrArgmax, logits);
  pdl_enter();
  // nc-ok: rows: uploaded before the launch (or the constant iota)
  const float* l = logits + (int64_t)rows[blockIdx.x] * ld;
  float bv = -FLT_MAX;
  int bi = 0x7fffffff;
  bool broken = false;  // a NaN or +inf seen: the row's id is −1
  // `better` is a total preference (largest value, then smallest id; NaN never wins), so the
  // visiting order does not change the result. A 16-byte-aligned row goes as float4, kBatch
  // loads per thread issued before the first compare (one L2 round trip for a 32 K vocabulary
  // with 1,024 threads, where the scalar loop had ~31 in a row); the tail and unaligned rows
  // go one float at a time.
  int j0 = 0;
  if ((reinterpret_cast<uintptr_t>(l) & 15) == 0) {
    constexpr int kBatch = 8;
    const int n4 = vocab / 4;
    const float4* l4 = reinterpret_cast<const float4*>(l);
    for (int k0 = threadIdx.x; k0 < n4; k0 += kBatch * blockDim.x) {
      float4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int k = k0 + u * (int)blockDim.x;
        if (k < n4) v[u] = l4[k];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int k = k0 + u * (int)blockDim.x;
        if (k >= n4) break;
        better(bv, bi, v[u].x, 4 * k);
        better(bv, bi, v[u].y, 4 * k + 1);
        better(bv, bi, v[u].z, 4 * k + 2);
        better(bv, bi, v[u].w, 4 * k + 3);
        broken |= broken_logit(v[u].x) | broken_logit(v[u].y) | broken_logit(v[u].z) |
                  broken_logit(v[u].w);
      }
    }
    j0 = 4 * n4;
  }
  for (int j = j0 + threadIdx.x; j < vocab; j += blockDim.x) {
    better(bv, bi, l[j], j);
    broken |= broken_logit(l[j]);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const int i = __shfl_xor_sync(0xffffffffu, bi, o);
    better(bv, bi, v, i);
  }
  __shared__ float sv[32];
  __shared__ int si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  if (__syncthreads_or(broken)) {
    if (threadIdx.x == 0) out[blockIdx.x] = -1;
    return;
  }
  if (warp == 0) {
    bv = lane < (int)(blockDim.x >> 5) ? sv[lane] : -FLT_MAX;
    bi = lane < (int)(blockDim.x >> 5) ? si[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, bv, o);
      const int i = __shfl_xor_sync(0xffffffffu, bi, o);
      better(bv, bi, v, i);
    }
    if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
  }
}

constexpr int kAttnChunk = 128;

/// Element e of KV head kvh at `slot` of a cache pool, as fp32: T, or (kv scales non-null: a
/// q8_0 cache, attention.cuh) int8 times the fp16 scale of its 32-value block.
template <typename T>
__device__ __forceinline__ float kv_elem(const void* pool, const __half* scales, int64_t slot,
                                         int n_kv_heads, int kvh, int hd, int e) {
  const int64_t i = (slot * n_kv_heads + kvh) * hd + e;
  if (scales == nullptr) return to_f(static_cast<const T*>(pool)[i]);
  return static_cast<float>(static_cast<const int8_t*>(pool)[i]) *
         __half2float(scales[(slot * n_kv_heads + kvh) * q8_scale_stride(hd) + e / 32]);
}

template <typename T>
__global__ void attention_generic_kernel(const T* q, int64_t ldq, const void* kc, const void* vc,
                                         const __half* kscale, const __half* vscale, int n_q_heads,
                                         int n_kv_heads, int hd, int block_size,
                                         const int32_t* __restrict__ tables, int width,
                                         const int32_t* __restrict__ token_seq,
                                         const int32_t* __restrict__ positions, float scale,
                                         T* __restrict__ out, int64_t ldo) {
  pdl_enter();
  __shared__ float qs[256];
  __shared__ float p[kAttnChunk];
  __shared__ float red[32];
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int kvh = h / (n_q_heads / n_kv_heads);
  // nc-ok: positions, token_seq, tables: the batch layout, uploaded before the step
  const int n_keys = positions[t] + 1;
  const int32_t* table = tables + (int64_t)token_seq[t] * width;  // nc-ok: the layout
  const T* qr = q + (int64_t)t * ldq + (int64_t)h * hd;
  for (int d = tid; d < hd; d += blockDim.x) qs[d] = to_f(qr[d]) * scale;
  float acc0 = 0.0f, acc1 = 0.0f;  // dims tid and tid + 128 (head_dim <= 256)
  float m = -INFINITY, l = 0.0f;
  __syncthreads();
  for (int j0 = 0; j0 < n_keys; j0 += kAttnChunk) {
    const int j = j0 + tid;
    float s = -INFINITY;
    if (j < n_keys) {
      // nc-ok: tables: the batch layout, uploaded before the step
      const int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
      s = 0.0f;
      for (int d = 0; d < hd; ++d)
        s += qs[d] * kv_elem<T>(kc, kscale, slot, n_kv_heads, kvh, hd, d);
    }
    // chunk max
    float cm = s;
    for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
    if ((tid & 31) == 0) red[tid >> 5] = cm;
    __syncthreads();
    cm = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) cm = fmaxf(cm, red[w]);
    const float m_new = fmaxf(m, cm);
    const float e = j < n_keys ? __expf(s - m_new) : 0.0f;
    p[tid] = e;
    const float rescale = m == -INFINITY ? 0.0f : __expf(m - m_new);
    __syncthreads();
    float cs = e;
    for (int o = 16; o > 0; o >>= 1) cs += __shfl_xor_sync(0xffffffffu, cs, o);
    __syncthreads();  // everyone has read red[] for the max
    if ((tid & 31) == 0) red[tid >> 5] = cs;
    __syncthreads();
    cs = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) cs += red[w];
    l = l * rescale + cs;
    acc0 *= rescale;
    acc1 *= rescale;
    const int n = min(kAttnChunk, n_keys - j0);
    for (int jj = 0; jj < n; ++jj) {
      const int jk = j0 + jj;
      // nc-ok: tables: the batch layout, uploaded before the step
      const int64_t slot = (int64_t)table[jk / block_size] * block_size + jk % block_size;
      if (tid < hd) acc0 += p[jj] * kv_elem<T>(vc, vscale, slot, n_kv_heads, kvh, hd, tid);
      if (tid + kAttnChunk < hd)
        acc1 += p[jj] * kv_elem<T>(vc, vscale, slot, n_kv_heads, kvh, hd, tid + kAttnChunk);
    }
    m = m_new;
    __syncthreads();  // p[] and red[] are rewritten by the next chunk
  }
  T* o = out + (int64_t)t * ldo + (int64_t)h * hd;
  const float inv = 1.0f / l;
  if (tid < hd) o[tid] = from_f<T>(acc0 * inv);
  if (tid + kAttnChunk < hd) o[tid + kAttnChunk] = from_f<T>(acc1 * inv);
}

template <typename T, typename Y, int M>
__global__ void dense_gemv_kernel(const T* __restrict__ W, int64_t N, int64_t K, const T* x,
                                  int64_t ldx, Y* __restrict__ y, int64_t ldy,
                                  const float* __restrict__ bias) {
  PERFX_TRACE(kTrDenseGemv, W);
  pdl_enter();
  const int lane = threadIdx.x & 31;
  const int64_t n = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (n >= N) return;
  const uint4* wr = reinterpret_cast<const uint4*>(W + n * K);
  const int64_t k8 = K / 8;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  int64_t i = lane;
  for (; i + 96 < k8; i += 128) {  // 4 loads in flight per lane
    uint4 q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) q[u] = __ldcs(wr + i + 32 * u);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float wf[8];
      unpack8<T>(q[u], wf);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[8];
        unpack8<T>(ld_act(reinterpret_cast<const uint4*>(x + m * ldx) + i + 32 * u), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[m] += wf[e] * xf[e];
      }
    }
  }
  for (; i < k8; i += 32) {
    float wf[8];
    unpack8<T>(__ldcs(wr + i), wf);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[8];
      unpack8<T>(ld_act(reinterpret_cast<const uint4*>(x + m * ldx) + i), xf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[m] += wf[e] * xf[e];
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      // nc-ok: bias: a weight, immutable
      if (bias) v += bias[n];
      if constexpr (sizeof(Y) == 4)
        y[m * ldy + n] = v;
      else
        y[m * ldy + n] = from_f<T>(v);
    }
  }
}

template <typename T, typename Y>
void dense_gemv_m(const T* W, int64_t N, int64_t K, const T* x, int M, int64_t ldx, Y* y,
                  int64_t ldy, const float* bias, cudaStream_t s) {
  const int warps = 8;
  const unsigned grid = (unsigned)((N + warps - 1) / warps);
  switch (M) {
#define PERFX_GEMV_M(m)                                                                            \
  case m:                                                                                          \
    launch_pdl(dense_gemv_kernel<T, Y, m>, dim3(grid), dim3(32 * warps), 0, s, W, N, K, x, ldx, y, \
               ldy, bias);                                                                         \
    break;
    PERFX_GEMV_M(1)
    PERFX_GEMV_M(2)
    PERFX_GEMV_M(3) PERFX_GEMV_M(4) PERFX_GEMV_M(5) PERFX_GEMV_M(6) PERFX_GEMV_M(7) PERFX_GEMV_M(8)
#undef PERFX_GEMV_M
  }
}

unsigned grid_cols(int64_t cols, int threads) {
  const int64_t b = (cols + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

}  // namespace

#define PERFX_DISPATCH_ACT(act, ...) \
  do {                               \
    if ((act) == DType::BF16) {      \
      using T = __nv_bfloat16;       \
      __VA_ARGS__;                   \
    } else {                         \
      using T = __half;              \
      __VA_ARGS__;                   \
    }                                \
  } while (0)

void launch_embedding(const void* table, const int32_t* ids, int n_tokens, int64_t hidden,
                      void* out, int64_t ldo, DType, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  const bool vec =
      hidden % 8 == 0 && ldo % 8 == 0 && ((uintptr_t)table % 16 == 0) && ((uintptr_t)out % 16 == 0);
  launch_pdl(copy_rows_kernel, dim3(n_tokens), dim3(128), 0, stream,
             static_cast<const uint16_t*>(table), (int64_t)hidden, ids, (int64_t)hidden,
             static_cast<uint16_t*>(out), ldo, vec);
}

void launch_rms_norm(const void* x, int64_t ldx, const float* w, float eps, int rows, int64_t n,
                     void* out, int64_t ldo, DType act, cudaStream_t stream) {
  if (rows <= 0) return;
  PERFX_DISPATCH_ACT(
      act, if (!launch_norm_vec<T>(static_cast<const T*>(x), ldx, nullptr, 0, nullptr, 0, w, eps,
                                   rows, n, static_cast<T*>(out), ldo, stream))
               launch_pdl(rms_norm_kernel<T>, dim3(rows), dim3(kNormThreads), 0, stream,
                          static_cast<const T*>(x), ldx, w, eps, n, static_cast<T*>(out), ldo));
}

void launch_add_rms_norm(void* residual, int64_t ldr, const void* x, int64_t ldx, const float* w,
                         float eps, int rows, int64_t n, void* out, int64_t ldo, DType act,
                         cudaStream_t stream) {
  if (rows <= 0) return;
  PERFX_DISPATCH_ACT(
      act, if (!launch_norm_vec<T>(static_cast<const T*>(x), ldx, static_cast<const T*>(residual),
                                   ldr, static_cast<T*>(residual), ldr, w, eps, rows, n,
                                   static_cast<T*>(out), ldo, stream))
               launch_pdl(add_rms_norm_kernel<T>, dim3(rows), dim3(kNormThreads), 0, stream,
                          static_cast<T*>(residual), ldr, static_cast<const T*>(x), ldx, w, eps, n,
                          static_cast<T*>(out), ldo));
}

void launch_silu_mul(const void* gu, int64_t ldg, int rows, int64_t I, void* out, int64_t ldo,
                     DType act, cudaStream_t stream, bool interleaved, const float* bias) {
  if (rows <= 0) return;
  const dim3 grid(grid_cols(I, 256), (unsigned)rows);
  PERFX_DISPATCH_ACT(
      act, launch_pdl(interleaved ? silu_mul_kernel<T, true> : silu_mul_kernel<T, false>, grid,
                      dim3(256), 0, stream, static_cast<const T*>(gu), ldg, I, bias,
                      static_cast<T*>(out), ldo));
}

void launch_gather_rows(const void* x, int64_t ldx, const int32_t* rows, int n, int64_t cols,
                        void* out, int64_t ldo, DType, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = cols % 8 == 0 && ldx % 8 == 0 && ldo % 8 == 0 && ((uintptr_t)x % 16 == 0) &&
                   ((uintptr_t)out % 16 == 0);
  launch_pdl(copy_rows_kernel, dim3(n), dim3(128), 0, stream, static_cast<const uint16_t*>(x), ldx,
             rows, cols, static_cast<uint16_t*>(out), ldo, vec);
}

void launch_add_bias(void* y, int64_t ldy, DType ydt, const float* bias, int rows, int64_t cols,
                     cudaStream_t stream) {
  if (rows <= 0) return;
  const dim3 grid(grid_cols(cols, 256), (unsigned)rows);
  if (ydt == DType::F32) {
    launch_pdl(add_bias_f32_kernel, grid, dim3(256), 0, stream, static_cast<float*>(y), ldy, bias,
               cols);
    return;
  }
  PERFX_DISPATCH_ACT(ydt, launch_pdl(add_bias_kernel<T>, grid, dim3(256), 0, stream,
                                     static_cast<T*>(y), ldy, bias, cols));
}

void launch_penalties(float* logits, int64_t ld, const PenaltyEntry* entries, int n,
                      cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(penalties_kernel, dim3((n + 255) / 256), dim3(256), 0, stream, logits, ld, entries, n);
}

void launch_attention_generic(const void* q, int64_t ldq, const void* k_cache, const void* v_cache,
                              const void* k_scale, const void* v_scale, int n_q_heads,
                              int n_kv_heads, int head_dim, int block_size, const int32_t* tables,
                              int width, const int32_t* token_seq, const int32_t* positions,
                              int n_tokens, float scale, void* out, int64_t ldo, DType act,
                              cudaStream_t stream) {
  if (n_tokens <= 0) return;
  const dim3 grid((unsigned)n_tokens, (unsigned)n_q_heads);
  PERFX_DISPATCH_ACT(
      act, launch_pdl(attention_generic_kernel<T>, grid, dim3(kAttnChunk), 0, stream,
                      static_cast<const T*>(q), ldq, k_cache, v_cache,
                      static_cast<const __half*>(k_scale), static_cast<const __half*>(v_scale),
                      n_q_heads, n_kv_heads, head_dim, block_size, tables, width, token_seq,
                      positions, scale, static_cast<T*>(out), ldo));
}

bool launch_dense_gemv(const void* W, int64_t N, int64_t K, const void* x, int M, int64_t ldx,
                       void* y, DType yt, int64_t ldy, const float* bias, DType act,
                       cudaStream_t stream) {
  auto al = [](const void* p) { return ((uintptr_t)p & 15) == 0; };
  if (M < 1 || M > 8 || K % 8 != 0 || ldx % 8 != 0 || !al(W) || !al(x)) return false;
  PERFX_DISPATCH_ACT(act, {
    if (yt == DType::F32)
      dense_gemv_m<T, float>(static_cast<const T*>(W), N, K, static_cast<const T*>(x), M, ldx,
                             static_cast<float*>(y), ldy, bias, stream);
    else
      dense_gemv_m<T, T>(static_cast<const T*>(W), N, K, static_cast<const T*>(x), M, ldx,
                         static_cast<T*>(y), ldy, bias, stream);
  });
  return true;
}

void launch_argmax(const float* logits, int64_t ld, const int32_t* rows, int n, int vocab,
                   int32_t* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(argmax_kernel, dim3(n), dim3(1024), 0, stream, logits, ld, rows, vocab, out);
}

// One CTA: the sampled ids are read into shared memory before any is written, so src may be out.
__global__ void feed_ids_kernel(const int32_t* host_ids, const int32_t* fed_rows,
                                const int32_t* src, int n_src, int32_t* out, int n) {
  extern __shared__ int32_t s_src[];
  for (int i = threadIdx.x; i < n_src; i += blockDim.x) s_src[i] = src[i];
  __syncthreads();
  for (int t = threadIdx.x; t < n; t += blockDim.x) {
    const int r = fed_rows[t];
    out[t] = r >= 0 ? s_src[r] : host_ids[t];
  }
}

void launch_feed_ids(const int32_t* host_ids, const int32_t* fed_rows, const int32_t* src,
                     int n_src, int32_t* out, int n, cudaStream_t stream) {
  if (n <= 0) return;
  feed_ids_kernel<<<1, 256, (size_t)n_src * 4, stream>>>(host_ids, fed_rows, src, n_src, out, n);
}

PERFX_TRACE_BINDER(trace_bind_kernels)

}  // namespace perfx::cuda
