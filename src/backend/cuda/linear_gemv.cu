// Decode-sized GEMV (M = 1..8 tokens) for W4 and W8 weights on tensor cores.
//
// One CTA per 16-row block; its warps split the K chunks (warp w takes chunks w, w + NW, ...),
// each lane streams its 16-byte weight quads straight from global memory into registers, kU
// chunks in flight, together with its two (W4) or one (W8) 16-byte activation loads and the
// group's scale/zero record. The packed word is the mma A fragment (16 rows × 16 k) after the
// magic-number conversion; B is the activations (8 token columns; columns >= M are zero); the
// fp32 mma result for one 32-channel half-chunk is scaled by the group's scale into an fp32
// accumulator. The NW warps' accumulators are summed in shared memory and the first 128 threads
// write the block's outputs (y[token, row], + bias).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <mutex>
#include <string>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cvt.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "backend/cuda/linear_internal.cuh"
#include "backend/cuda/norm_math.cuh"

namespace perfx::cuda {
namespace {

using frag::BF16;
using frag::F16;

constexpr int kMaxWarps = 16;  // shared reduction buffer size
// Staged activations: up to 96 KB of dynamic shared memory when forced (opt-in attribute set once
// per instance; two 8-warp CTAs, also the register limit, still fit in an SM's 228 KB with their
// 16 KB of static reduction and L2-warming scratch each, barely: 226 KB); the
// default stages only up to 32 KB (<= 8 loads per thread of a 256-thread CTA), where the copy
// latency stays below one weight batch's.
constexpr size_t kMaxXsBytes = 96 * 1024;
constexpr size_t kAutoXsBytes = 32 * 1024;

/// Chunks in flight per lane: 8 when the activations are staged in shared memory (a chunk then
/// costs the lane 4 + 2·records registers), 4 when they travel in registers with the weights.
template <bool XS>
struct ChunksInFlight {
  static constexpr int value = XS ? 8 : 4;
};

/// Row stride (elements) of the staged activations for k_pad channels: ≡ 32 (mod 64) so rows 2p
/// and 2p+1, read by one quarter-warp (4 lanes × 16 bytes each), fall 64 bytes apart mod 128
/// (no bank conflict).
inline int xs_row_stride(int64_t k_pad) {
  return (int)(ceil_div<int64_t>(k_pad, 64) * 64 + 32);
}

/// The CTA's dynamic shared memory, where the staged activations go (xs).
__device__ __forceinline__ uint4* dyn_smem_xs() {
#if defined(PERFX_CUDA_EMULATION)
  return static_cast<uint4*>(::perfx_emu_dyn_smem());  // the CPU emulator's (cuda_emu.h)
#else
  extern __shared__ uint4 xs_dyn[];
  return xs_dyn;
#endif
}

/// Copies x[0..M)[0..k_pad) (zero beyond K) to shared memory xs (row stride xs_ld elements, a
/// multiple of 8), then __syncthreads(). All threads of the CTA must call it. Each thread keeps 4
/// 16-byte loads in flight (the copy is latency-bound: it runs while the first weight batch is
/// already in flight).
template <typename T>
__device__ __forceinline__ void stage_x(uint4* xs, const T* x, int M, int64_t ldx, int64_t K,
                                        int64_t k_pad, int xs_ld) {
  constexpr int B = 4;
  const int units = (int)(k_pad / 8), total = M * units;
  for (int i0 = threadIdx.x; i0 < total; i0 += B * blockDim.x) {
    uint4 v[B];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int i = i0 + b * blockDim.x;
      v[b] = make_uint4(0, 0, 0, 0);
      if (i < total) {
        const int m = i / units, u = i - m * units;
        const int64_t k = 8 * (int64_t)u;
        if (k < K) v[b] = ld_act(x + (int64_t)m * ldx + k);
      }
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int i = i0 + b * blockDim.x;
      if (i < total) {
        const int m = i / units, u = i - m * units;
        xs[m * (xs_ld / 8) + u] = v[b];
      }
    }
  }
  __syncthreads();
}

/// GemvNormLink's γ chunks for stage_x_norm: this thread's chunks t and t + tv (two float4 each),
/// loaded before the PDL wait (γ is a weight).
struct NormGamma {
  float4 g[2][2];
};
__device__ __forceinline__ NormGamma load_norm_gamma(const float* gamma, int64_t K) {
  NormGamma r;
  const int n8 = (int)(K / 8), tv = norm_vec_threads(n8);
  const float4* g4 = reinterpret_cast<const float4*>(gamma);
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int i = norm_chunk_of(c, tv, n8);
    if (i >= 0) {
      r.g[c][0] = g4[2 * i];      // nc-ok: γ, the norm weight, immutable
      r.g[c][1] = g4[2 * i + 1];  // nc-ok: γ
    }
  }
  return r;
}

/// stage_x's counterpart for the consumer of a fused norm (GemvNormLink::gamma): xs[m] = γ ⊙ s[m] ·
/// rsqrt(mean(s[m]²) + eps), rounded to T, zero beyond K, then __syncthreads(). Thread t takes
/// the 16-byte chunks t and t + tv of the row (tv = norm_vec_threads(K / 8); norm_chunk_of), as
/// rms_norm_vec_kernel's threads do, and both sum and normalize with norm_math.cuh's helpers, so
/// xs is bit for bit that kernel's output (an fp32 sum in another order could round 1/rms
/// differently). g: load_norm_gamma's. All threads of the CTA must call it; blockDim.x >= tv,
/// K % 8 == 0 and K / 8 <= 2 · tv (checked by the host).
template <typename T>
__device__ __forceinline__ void stage_x_norm(uint4* xs, const T* s, int M, int64_t lds, int64_t K,
                                             int64_t k_pad, int xs_ld, const NormGamma& g,
                                             float eps) {
  const int n8 = (int)(K / 8), tv = norm_vec_threads(n8), ld8 = xs_ld / 8;
  for (int m = 0; m < M; ++m) {
    const T* row = s + (int64_t)m * lds;
    uint4 raw[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int i = norm_chunk_of(c, tv, n8);
      if (i >= 0) raw[c] = ld_act(row + 8 * (int64_t)i);
    }
    float ss = 0.0f, v[2][8];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int i = norm_chunk_of(c, tv, n8);
      if (i < 0) continue;
      unpack8<T>(raw[c], v[c]);
      sumsq8(ss, v[c]);
    }
    const float inv = rms_inv_of(ss, (int)K, eps);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int i = norm_chunk_of(c, tv, n8);
      if (i < 0) continue;
      xs[m * ld8 + i] = norm_chunk<T>(v[c], g.g[c][0], g.g[c][1], inv);
    }
    for (int u = n8 + (int)threadIdx.x; u < (int)(k_pad / 8); u += blockDim.x)
      xs[m * ld8 + u] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
}

/// The output element gemv_reduce_store's thread i (< 128) writes: row 16·nb + gid + 8·(c / 2)
/// and token 2·tid + c % 2 of lane i / 4's accumulators (c = i % 4).
__device__ __forceinline__ void gemv_store_slot(int i, int64_t nb, int64_t& row, int& token) {
  const int src_lane = i >> 2, c = i & 3, gid = src_lane >> 2, tid = src_lane & 3;
  row = nb * 16 + gid + 8 * (c >> 1);
  token = 2 * tid + (c & 1);
}

/// Sums the per-warp accumulators of the 16-row block and writes y. acc: this lane's 4 mma
/// accumulator values: (row gid, token 2tid), (gid, 2tid+1), (gid+8, 2tid), (gid+8, 2tid+1).
/// res (GemvNormLink's producer): instead of y, res[token, row] = round(r_old + round(y)), where
/// r_old is this thread's residual element, loaded by the caller (gemv_store_slot's element).
template <typename OutT>
__device__ __forceinline__ void gemv_reduce_store(const float acc[4], int64_t nb, int64_t N, int M,
                                                  OutT* __restrict__ y, int64_t ldy,
                                                  const float* __restrict__ bias,
                                                  OutT* res = nullptr, int64_t ldr = 0,
                                                  OutT r_old = OutT()) {
  __shared__ float4 red[kMaxWarps][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  red[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (threadIdx.x < 128) {
    const int i = threadIdx.x, src_lane = i >> 2, c = i & 3;
    float s = 0.f;
    for (int w = 0; w < nw; ++w) s += reinterpret_cast<const float*>(&red[w][src_lane])[c];
    int64_t row;
    int token;
    gemv_store_slot(i, nb, row, token);
    if (row < N && token < M) {
      // nc-ok: bias: a weight, immutable
      if (bias != nullptr) s += bias[row];
      if (res != nullptr)  // add_rms_norm's sum: both operands rounded to OutT, added in fp32
        res[(int64_t)token * ldr + row] =
            frag::to_out<OutT>(static_cast<float>(r_old) + frag::round_to<OutT>(s));
      else
        y[(int64_t)token * ldy + row] = frag::to_out<OutT>(s);
    }
  }
}

/// How a W4 chunk's halves find their scale/zero records (w4_gemv's RK).
enum W4RecKind : int {
  kRecGroup = 0,  // group >= 64: one record serves the whole chunk
  kRecPair = 1,   // group 32: a record per half
  kRecSym = 2,    // group 32, symmetric (W4Dims::sym): one record per chunk, a scale pair per half
};
W4RecKind rec_kind(const W4View& w) {
  return w.d.sym ? kRecSym : w.d.gs_shift == 0 ? kRecPair : kRecGroup;
}

/// W4 GEMV. XS: activations staged in shared memory (dynamic, M × xs_ld elements), else loaded
/// per chunk into registers. RK: the records' W4RecKind.
template <typename Tag, typename OutT, bool XS, int RK>
__global__ void __launch_bounds__(512)
    w4_gemv_kernel(W4View w, const typename Tag::T* x, int M, int64_t ldx, OutT* __restrict__ y,
                   int64_t ldy, const float* __restrict__ bias, int xs_ld, bool late_trigger,
                   L2Prefetch pf, GemvNormLink link) {
  PERFX_TRACE(kTrGemv1, w.q);
  constexpr int U = ChunksInFlight<XS>::value;
  constexpr int NR = RK == kRecPair ? 2 : 1;
  __shared__ uint4 warm[kMaxWarps * 32];  // frag::l2_warm_share's scratch
  uint4* const xs = dyn_smem_xs();
  const int64_t nb = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int gid = lane >> 2, tid = lane & 3;
  const int KC = w.d.KC;
  const int64_t K = w.d.K;
  const int gs_shift = w.d.gs_shift;
  const bool has_x = gid < M;
  const typename Tag::T* xrow = x + (has_x ? (int64_t)gid * ldx : 0);
  const uint4* qb = w.q + frag::w4_q_index(KC, nb, 0, lane);
  const uint2* szb = w.sz + frag::w4_sz_index(w.d.G, nb, 0, gid);
  const uint4 zero4 = make_uint4(0, 0, 0, 0);

  uint4 wq[U];
  uint2 sr[U][NR];
  uint4 xv[XS ? 1 : U][2];
  // Issue the loads of the batch of chunks kc0 + u·nw (u < U): weights and records (immutable,
  // so also before pdl_wait), then the activations.
  auto load_w = [&](int kc0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kc = kc0 + u * nw;
      if (kc < KC) {
        wq[u] = frag::ld_stream(qb + (int64_t)kc * 32);
        const int64_t g0 = RK == kRecSym ? kc : frag::w4_group_of_half(2 * (int64_t)kc, gs_shift);
        // nc-ok: scale/zero records, immutable
        sr[u][0] = __ldg(szb + g0 * 8);
        if constexpr (RK == kRecPair)
          sr[u][NR - 1] = __ldg(szb + (g0 + 1) * 8);  // group 32: g0 + 1 = 2kc + 1; nc-ok
      }
    }
  };
  auto load_x = [&](int kc0) {
    if constexpr (!XS) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int kc = kc0 + u * nw;
        if (kc < KC) {
          const int64_t k0 = (int64_t)kc * 64 + 8 * tid;
          xv[u][0] = has_x ? ld_act(xrow + k0) : zero4;
          xv[u][1] = (has_x && (int64_t)kc * 64 + 32 < K) ? ld_act(xrow + k0 + 32) : zero4;
        }
      }
    }
  };

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int kc0 = warp;
  if (!late_trigger) pdl_trigger();
  load_w(kc0);
  frag::l2_warm_share(pf, warm);  // the next linear's first bytes, while the predecessor runs
  // GemvNormLink's consumer (only with x staged: gemv_stages_x): γ, a weight, before the wait
  NormGamma gamma{};
  if constexpr (XS) {
    if (link.gamma != nullptr) gamma = load_norm_gamma(link.gamma, K);
  } else {
    if (link.gamma != nullptr) __trap();  // a launcher bug: the raw residual would be multiplied
  }
  pdl_wait();
  // GemvNormLink's producer: this thread's residual element, read now (written by an earlier
  // kernel: a coherent load) so that its latency hides behind the main loop
  OutT* const res = static_cast<OutT*>(link.residual);
  OutT r_old = OutT();
  if (res != nullptr && threadIdx.x < 128) {
    int64_t row;
    int token;
    gemv_store_slot(threadIdx.x, nb, row, token);
    if (row < w.d.N && token < M) r_old = ld_prev(res + (int64_t)token * link.ldr + row);
  }
  load_x(kc0);
  if constexpr (XS) {
    if (link.gamma != nullptr)  // GemvNormLink's consumer: x is the residual; normalize it here
      stage_x_norm(xs, x, M, ldx, K, 64 * (int64_t)KC, xs_ld, gamma, link.eps);
    else
      stage_x(xs, x, M, ldx, K, 64 * (int64_t)KC, xs_ld);
  }
  while (kc0 < KC) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kc = kc0 + u * nw;
      if (kc < KC) {  // warp-uniform: the mma below needs the whole warp
        const uint32_t words[4] = {wq[u].x, wq[u].y, wq[u].z, wq[u].w};
        uint4 xb[2];
        if constexpr (XS) {
          const uint4* xr = xs + gid * (xs_ld / 8) + 8 * kc + tid;  // x[gid][64kc + 8tid]
          xb[0] = has_x ? xr[0] : zero4;
          xb[1] = has_x ? xr[4] : zero4;  // + 32 channels (zero-filled beyond K)
        } else {
          xb[0] = xv[u][0];
          xb[1] = xv[u][1];
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint2 r = frag::w4_rec_of_half(sr[u][RK == kRecPair ? h : 0], RK == kRecSym, h);
          uint32_t z_lo, z_hi;
          frag::w4_neg_zeros<Tag>(r.y, z_lo, z_hi);
          float c[4] = {0.f, 0.f, 0.f, 0.f};
          frag::w4_half_mma<Tag>(c, words, h, z_lo, z_hi, xb[h]);
          const float s_lo = frag::f16_lo(r.x), s_hi = frag::f16_hi(r.x);
          acc[0] = fmaf(s_lo, c[0], acc[0]);
          acc[1] = fmaf(s_lo, c[1], acc[1]);
          acc[2] = fmaf(s_hi, c[2], acc[2]);
          acc[3] = fmaf(s_hi, c[3], acc[3]);
        }
      }
    }
    kc0 += nw * U;
    load_w(kc0);
    load_x(kc0);
  }
  if (late_trigger) pdl_trigger();
  gemv_reduce_store<OutT>(acc, nb, w.d.N, M, y, ldy, bias, res, link.ldr, r_old);
  frag::l2_warm_drain(pf);
}

/// W8 (Q8_0) GEMV; XS as above. One scale record per 32-channel chunk.
template <typename Tag, typename OutT, bool XS>
__global__ void __launch_bounds__(512)
    w8_gemv_kernel(W8View w, const typename Tag::T* x, int M, int64_t ldx, OutT* __restrict__ y,
                   int64_t ldy, const float* __restrict__ bias, int xs_ld, bool late_trigger) {
  PERFX_TRACE(kTrGemv1, w.q);
  constexpr int U = ChunksInFlight<XS>::value;
  uint4* const xs = dyn_smem_xs();
  const int64_t nb = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int gid = lane >> 2, tid = lane & 3;
  const int KC = w.d.KC;
  const int gs_shift = w.d.gs_shift;
  const bool has_x = gid < M;
  const typename Tag::T* xrow = x + (has_x ? (int64_t)gid * ldx : 0);
  const uint4* qb = w.q + frag::w8_q_index(KC, nb, 0, lane);
  const uint32_t* sb = w.s + frag::w8_s_index(w.d.G, nb, 0, gid);
  const uint4 zero4 = make_uint4(0, 0, 0, 0);

  uint4 wq[U];
  uint32_t sr[U];
  uint4 xv[XS ? 1 : U];
  auto load_w = [&](int kc0) {  // weights and scales (also before pdl_wait)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kc = kc0 + u * nw;
      if (kc < KC) {
        wq[u] = frag::ld_stream(qb + (int64_t)kc * 32);
        // nc-ok: scale/zero records, immutable
        sr[u] = __ldg(sb + ((int64_t)kc >> gs_shift) * 8);
      }
    }
  };
  auto load_x = [&](int kc0) {
    if constexpr (!XS) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int kc = kc0 + u * nw;
        if (kc < KC) xv[u] = has_x ? ld_act(xrow + (int64_t)kc * 32 + 8 * tid) : zero4;
      }
    }
  };

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int kc0 = warp;
  if (!late_trigger) pdl_trigger();
  load_w(kc0);
  pdl_wait();
  load_x(kc0);
  if constexpr (XS) stage_x(xs, x, M, ldx, w.d.K, 32 * (int64_t)KC, xs_ld);
  while (kc0 < KC) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kc = kc0 + u * nw;
      if (kc < KC) {
        const uint32_t words[4] = {wq[u].x, wq[u].y, wq[u].z, wq[u].w};
        uint4 xb;
        if constexpr (XS)
          xb = has_x ? xs[gid * (xs_ld / 8) + 4 * kc + tid] : zero4;  // x[gid][32kc + 8tid]
        else
          xb = xv[u];
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          uint32_t a[4];
          if constexpr (std::is_same_v<Tag, F16>) {
            frag::w8_word_to_f16x2(words[2 * jj], a[0], a[1]);
            frag::w8_word_to_f16x2(words[2 * jj + 1], a[2], a[3]);
          } else {
            frag::w8_word_to_bf16x2(words[2 * jj], a[0], a[1]);
            frag::w8_word_to_bf16x2(words[2 * jj + 1], a[2], a[3]);
          }
          frag::mma16816<Tag>(c, a, jj == 0 ? xb.x : xb.z, jj == 0 ? xb.y : xb.w);
        }
        const float s_lo = frag::f16_lo(sr[u]), s_hi = frag::f16_hi(sr[u]);
        acc[0] = fmaf(s_lo, c[0], acc[0]);
        acc[1] = fmaf(s_lo, c[1], acc[1]);
        acc[2] = fmaf(s_hi, c[2], acc[2]);
        acc[3] = fmaf(s_hi, c[3], acc[3]);
      }
    }
    kc0 += nw * U;
    load_w(kc0);
    load_x(kc0);
  }
  if (late_trigger) pdl_trigger();
  gemv_reduce_store<OutT>(acc, nb, w.d.N, M, y, ldy, bias);
}

/// PERFX_CUDA_PDL_GEMV1=late: w4_gemv / w8_gemv let the next kernel launch after their main
/// loop instead of at entry (docs/cuda_linear_notes.md §10).
bool gemv1_late() {
  static const bool late = env_is("PERFX_CUDA_PDL_GEMV1", "late");
  return late;
}

int gemv_warps(int warps) {
  if (warps == 0) return 8;
  check(warps == 4 || warps == 8 || warps == 16, "gemv: warps must be 4, 8 or 16");
  return warps;
}

/// Whether to stage x in shared memory: x_smem 1 = when <= kMaxXsBytes, 0 = never, -1 = auto
/// (when <= kAutoXsBytes).
bool use_xs(int M, int xs_ld, int x_smem) {
  const size_t bytes = (size_t)M * xs_ld * 2;
  return x_smem > 0 ? bytes <= kMaxXsBytes : x_smem < 0 ? bytes <= kAutoXsBytes : false;
}

/// Whether w4_gemv stages x in shared memory: always for GemvNormLink's consumer (its norm is
/// computed there; the register path would multiply the raw residual), else use_xs.
bool gemv_stages_x(int M, int xs_ld, int x_smem, const GemvNormLink& link) {
  return link.gamma != nullptr || use_xs(M, xs_ld, x_smem);
}

/// GemvNormLink's preconditions (linear.cuh), as perfx::Error naming `who` and the need.
void check_norm_link(const char* who, const GemvNormLink& link, int64_t K, DType xt, DType yt,
                     int warps, int M, int64_t N) {
  const std::string w = who;
  PERFX_CHECK(link.residual == nullptr || link.gamma == nullptr,
              w + ": a GemvNormLink is the producer (residual) or the consumer (gamma), not both");
  if (link.residual != nullptr) {
    PERFX_CHECK(yt == xt, w + ": the fused residual add needs y in the activation dtype");
    PERFX_CHECK(link.ldr >= N, w + ": residual row stride " + std::to_string(link.ldr) +
                                   " < N = " + std::to_string(N));
  }
  if (link.gamma != nullptr) {
    const int64_t n8 = K / 8;
    PERFX_CHECK(
        K % 8 == 0 && K <= 4096,
        w + ": the fused norm needs K % 8 == 0 and K <= 4096, got K = " + std::to_string(K));
    PERFX_CHECK(32 * warps >= norm_vec_threads((int)n8),
                w + ": the fused norm needs " + std::to_string(norm_vec_threads((int)n8)) +
                    " threads, the CTA has " + std::to_string(32 * warps));
    PERFX_CHECK(((uintptr_t)link.gamma & 15) == 0, w + ": gamma must be 16-byte aligned");
    PERFX_CHECK(use_xs(M, xs_row_stride(64 * ((K + 63) / 64)), 1),
                w + ": the fused norm's staged input exceeds shared memory");
  }
}

/// Raises a staged-x instance's dynamic shared-memory limit to kMaxXsBytes, once per process.
template <typename Kernel>
void ensure_xs_attr(Kernel kernel, std::once_flag& once) {
  std::call_once(once, [&] {
    CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kMaxXsBytes));
  });
}
template <typename Tag, typename OutT, int RK>
void ensure_w4_xs() {
  static std::once_flag once;
  ensure_xs_attr(w4_gemv_kernel<Tag, OutT, true, RK>, once);
}
template <typename F>
void for_each_rec_kind(F f) {
  f(std::integral_constant<int, kRecGroup>{});
  f(std::integral_constant<int, kRecPair>{});
  f(std::integral_constant<int, kRecSym>{});
}
template <typename Tag, typename OutT>
void ensure_w8_xs() {
  static std::once_flag once;
  ensure_xs_attr(w8_gemv_kernel<Tag, OutT, true>, once);
}

template <typename Tag, typename OutT, int RK>
void launch_w4_gemv_rk(const W4View& w, const void* x, int M, int64_t ldx, void* y, int64_t ldy,
                       const float* bias, cudaStream_t stream, int warps, int x_smem,
                       const L2Prefetch& pf, const GemvNormLink& link) {
  const int xs_ld = xs_row_stride(64 * (int64_t)w.d.KC);
  const bool xs = gemv_stages_x(M, xs_ld, x_smem, link);
  const size_t smem = xs ? (size_t)M * xs_ld * 2 : 0;
  const auto* xp = static_cast<const typename Tag::T*>(x);
  auto* yp = static_cast<OutT*>(y);
  const dim3 grid((unsigned)w.d.NB), block(32 * warps);
  if (xs) ensure_w4_xs<Tag, OutT, RK>();
  auto* fn = xs ? w4_gemv_kernel<Tag, OutT, true, RK> : w4_gemv_kernel<Tag, OutT, false, RK>;
  launch_pdl(fn, grid, block, smem, stream, w, xp, M, ldx, yp, ldy, bias, xs_ld, gemv1_late(), pf,
             link);
  CUDA_CHECK_LAUNCH("w4_gemv_kernel");
}

template <typename Tag, typename OutT>
void launch_w4_gemv(const W4View& w, const void* x, int M, int64_t ldx, void* y, int64_t ldy,
                    const float* bias, cudaStream_t stream, int warps, int x_smem,
                    const L2Prefetch& pf, const GemvNormLink& link) {
  switch (rec_kind(w)) {
    case kRecPair:
      return launch_w4_gemv_rk<Tag, OutT, kRecPair>(w, x, M, ldx, y, ldy, bias, stream, warps,
                                                    x_smem, pf, link);
    case kRecSym:
      return launch_w4_gemv_rk<Tag, OutT, kRecSym>(w, x, M, ldx, y, ldy, bias, stream, warps,
                                                   x_smem, pf, link);
    default:
      return launch_w4_gemv_rk<Tag, OutT, kRecGroup>(w, x, M, ldx, y, ldy, bias, stream, warps,
                                                     x_smem, pf, link);
  }
}

template <typename Tag, typename OutT>
void launch_w8_gemv(const W8View& w, const void* x, int M, int64_t ldx, void* y, int64_t ldy,
                    const float* bias, cudaStream_t stream, int warps, int x_smem) {
  const int xs_ld = xs_row_stride(32 * (int64_t)w.d.KC);
  const bool xs = use_xs(M, xs_ld, x_smem);
  const auto* xp = static_cast<const typename Tag::T*>(x);
  auto* yp = static_cast<OutT*>(y);
  const dim3 grid((unsigned)w.d.NB), block(32 * warps);
  if (xs) ensure_w8_xs<Tag, OutT>();
  launch_pdl(xs ? w8_gemv_kernel<Tag, OutT, true> : w8_gemv_kernel<Tag, OutT, false>, grid, block,
             xs ? (size_t)M * xs_ld * 2 : 0, stream, w, xp, M, ldx, yp, ldy, bias, xs_ld,
             gemv1_late());
  CUDA_CHECK_LAUNCH("w8_gemv_kernel");
}

}  // namespace

void gemv_init_attributes() {
  for_each_rec_kind([](auto rk) {
    constexpr int RK = decltype(rk)::value;
    ensure_w4_xs<F16, float, RK>();
    ensure_w4_xs<F16, __half, RK>();
    ensure_w4_xs<BF16, float, RK>();
    ensure_w4_xs<BF16, __nv_bfloat16, RK>();
  });
  ensure_w8_xs<F16, float>();
  ensure_w8_xs<F16, __half>();
  ensure_w8_xs<BF16, float>();
  ensure_w8_xs<BF16, __nv_bfloat16>();
}

std::string describe_gemv_kernels() {
  gemv_init_attributes();
  std::string r;
  const int xs_bytes = 8 * 1024;  // M = 1, K = 4096
  for (int warps : {8, 16}) {
    const std::string t = "/" + std::to_string(warps) + "w";
    r += describe_kernel(("w4_gemv<f16,f32,xs>" + t).c_str(),
                         reinterpret_cast<const void*>(w4_gemv_kernel<F16, float, true, kRecGroup>),
                         32 * warps, xs_bytes);
    r += describe_kernel(("w4_gemv<f16,f32,xs,g32>" + t).c_str(),
                         reinterpret_cast<const void*>(w4_gemv_kernel<F16, float, true, kRecPair>),
                         32 * warps, xs_bytes);
    r += describe_kernel(("w4_gemv<f16,f32,xs,g32sym>" + t).c_str(),
                         reinterpret_cast<const void*>(w4_gemv_kernel<F16, float, true, kRecSym>),
                         32 * warps, xs_bytes);
    r += describe_kernel(
        ("w4_gemv<bf16,bf16,regs>" + t).c_str(),
        reinterpret_cast<const void*>(w4_gemv_kernel<BF16, __nv_bfloat16, false, kRecGroup>),
        32 * warps, 0);
    r += describe_kernel(("w8_gemv<f16,f32,xs>" + t).c_str(),
                         reinterpret_cast<const void*>(w8_gemv_kernel<F16, float, true>),
                         32 * warps, xs_bytes);
  }
  return r;
}

void w4_gemv(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
             int64_t ldy, const float* bias, cudaStream_t stream, int warps, int x_smem,
             const L2Prefetch& pf, const GemvNormLink& link) {
  check_linear_args("w4_gemv", w.d.N, w.d.K, x, xt, M, ldx, y, yt, ldy);
  PERFX_CHECK(M <= 8, "w4_gemv: M = " + std::to_string(M) + " > 8");
  PERFX_CHECK(pf.aligned(),
              "w4_gemv: an L2 prefetch range must be 16-byte aligned and a multiple of 16 bytes");
  const int nw = gemv_warps(warps);
  check_norm_link("w4_gemv", link, w.d.K, xt, yt, nw, M, w.d.N);
  if (M == 0) return;
  if (xt == DType::F16) {
    if (yt == DType::F32)
      launch_w4_gemv<F16, float>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem, pf, link);
    else
      launch_w4_gemv<F16, __half>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem, pf, link);
  } else {
    if (yt == DType::F32)
      launch_w4_gemv<BF16, float>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem, pf, link);
    else
      launch_w4_gemv<BF16, __nv_bfloat16>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem, pf, link);
  }
}

void w8_gemv(const W8View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
             int64_t ldy, const float* bias, cudaStream_t stream, int warps, int x_smem) {
  check_linear_args("w8_gemv", w.d.N, w.d.K, x, xt, M, ldx, y, yt, ldy);
  PERFX_CHECK(M <= 8, "w8_gemv: M = " + std::to_string(M) + " > 8");
  if (M == 0) return;
  const int nw = gemv_warps(warps);
  if (xt == DType::F16) {
    if (yt == DType::F32)
      launch_w8_gemv<F16, float>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem);
    else
      launch_w8_gemv<F16, __half>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem);
  } else {
    if (yt == DType::F32)
      launch_w8_gemv<BF16, float>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem);
    else
      launch_w8_gemv<BF16, __nv_bfloat16>(w, x, M, ldx, y, ldy, bias, stream, nw, x_smem);
  }
}

PERFX_TRACE_BINDER(trace_bind_gemv1)

}  // namespace perfx::cuda
