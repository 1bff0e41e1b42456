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

#include <string>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "backend/cuda/linear_internal.cuh"

namespace perfx::cuda {
namespace {

using frag::BF16;
using frag::F16;

constexpr int kU = 4;          // chunks in flight per lane
constexpr int kMaxWarps = 16;  // shared reduction buffer size

/// Sums the per-warp accumulators of the 16-row block and writes y. acc: this lane's 4 mma
/// accumulator values: (row gid, token 2tid), (gid, 2tid+1), (gid+8, 2tid), (gid+8, 2tid+1).
template <typename OutT>
__device__ __forceinline__ void gemv_reduce_store(const float acc[4], int64_t nb, int64_t N, int M,
                                                  OutT* __restrict__ y, int64_t ldy,
                                                  const float* __restrict__ bias) {
  __shared__ float4 red[kMaxWarps][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  red[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (threadIdx.x < 128) {
    const int i = threadIdx.x, src_lane = i >> 2, c = i & 3;
    float s = 0.f;
    for (int w = 0; w < nw; ++w) s += reinterpret_cast<const float*>(&red[w][src_lane])[c];
    const int gid = src_lane >> 2, tid = src_lane & 3;
    const int64_t row = nb * 16 + gid + 8 * (c >> 1);
    const int token = 2 * tid + (c & 1);
    if (row < N && token < M) {
      if (bias != nullptr) s += bias[row];
      y[(int64_t)token * ldy + row] = frag::to_out<OutT>(s);
    }
  }
}

template <typename Tag, typename OutT>
__global__ void __launch_bounds__(512) w4_gemv_kernel(W4View w, const typename Tag::T* __restrict__ x,
                                                      int M, int64_t ldx, OutT* __restrict__ y,
                                                      int64_t ldy, const float* __restrict__ bias) {
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

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int kc0 = warp; kc0 < KC; kc0 += nw * kU) {
    uint4 wq[kU], xv[kU][2];
    uint2 sr[kU][2];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int kc = kc0 + u * nw;
      if (kc < KC) {
        wq[u] = frag::ld_stream(qb + (int64_t)kc * 32);
        const int64_t g0 = frag::w4_group_of_half(2 * (int64_t)kc, gs_shift);
        sr[u][0] = __ldg(szb + g0 * 8);
        sr[u][1] = gs_shift == 0 ? __ldg(szb + (g0 + 1) * 8) : sr[u][0];
        const int64_t k0 = (int64_t)kc * 64 + 8 * tid;
        xv[u][0] = has_x ? frag::ld_ro(xrow + k0) : zero4;
        xv[u][1] = (has_x && (int64_t)kc * 64 + 32 < K) ? frag::ld_ro(xrow + k0 + 32) : zero4;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (kc0 + u * nw < KC) {
        const uint32_t words[4] = {wq[u].x, wq[u].y, wq[u].z, wq[u].w};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint2 r = sr[u][h];
          const uint32_t zl = r.y & 0xFu, zh = (r.y >> 8) & 0xFu;
          uint32_t z_lo, z_hi;
          if constexpr (std::is_same_v<Tag, F16>) {
            z_lo = frag::f16_neg_zero_lo(zl);
            z_hi = frag::f16_neg_zero_hi(zh);
          } else {
            z_lo = frag::bf16_neg_zero(zl);
            z_hi = frag::bf16_neg_zero(zh);
          }
          float c[4] = {0.f, 0.f, 0.f, 0.f};
          const uint4 xb = xv[u][h];
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            uint32_t a[4];
            if constexpr (std::is_same_v<Tag, F16>)
              frag::w4_word_to_frag_f16(words[2 * h + jj], z_lo, z_hi, a);
            else
              frag::w4_word_to_frag_bf16(words[2 * h + jj], z_lo, z_hi, a);
            frag::mma16816<Tag>(c, a, jj == 0 ? xb.x : xb.z, jj == 0 ? xb.y : xb.w);
          }
          const float s_lo = frag::f16_lo(r.x), s_hi = frag::f16_hi(r.x);
          acc[0] = fmaf(s_lo, c[0], acc[0]);
          acc[1] = fmaf(s_lo, c[1], acc[1]);
          acc[2] = fmaf(s_hi, c[2], acc[2]);
          acc[3] = fmaf(s_hi, c[3], acc[3]);
        }
      }
    }
  }
  gemv_reduce_store<OutT>(acc, nb, w.d.N, M, y, ldy, bias);
}

template <typename Tag, typename OutT>
__global__ void __launch_bounds__(512) w8_gemv_kernel(W8View w, const typename Tag::T* __restrict__ x,
                                                      int M, int64_t ldx, OutT* __restrict__ y,
                                                      int64_t ldy, const float* __restrict__ bias) {
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

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int kc0 = warp; kc0 < KC; kc0 += nw * kU) {
    uint4 wq[kU], xv[kU];
    uint32_t sr[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int kc = kc0 + u * nw;
      if (kc < KC) {
        wq[u] = frag::ld_stream(qb + (int64_t)kc * 32);
        sr[u] = __ldg(sb + ((int64_t)kc >> gs_shift) * 8);
        xv[u] = has_x ? frag::ld_ro(xrow + (int64_t)kc * 32 + 8 * tid) : zero4;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (kc0 + u * nw < KC) {
        const uint32_t words[4] = {wq[u].x, wq[u].y, wq[u].z, wq[u].w};
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
          frag::mma16816<Tag>(c, a, jj == 0 ? xv[u].x : xv[u].z, jj == 0 ? xv[u].y : xv[u].w);
        }
        const float s_lo = frag::f16_lo(sr[u]), s_hi = frag::f16_hi(sr[u]);
        acc[0] = fmaf(s_lo, c[0], acc[0]);
        acc[1] = fmaf(s_lo, c[1], acc[1]);
        acc[2] = fmaf(s_hi, c[2], acc[2]);
        acc[3] = fmaf(s_hi, c[3], acc[3]);
      }
    }
  }
  gemv_reduce_store<OutT>(acc, nb, w.d.N, M, y, ldy, bias);
}

int gemv_warps(int warps) {
  if (warps == 0) return 8;
  check(warps == 4 || warps == 8 || warps == 16, "gemv: warps must be 4, 8 or 16");
  return warps;
}

template <typename Tag, typename OutT>
void launch_w4_gemv(const W4View& w, const void* x, int M, int64_t ldx, void* y, int64_t ldy,
                    const float* bias, cudaStream_t stream, int warps) {
  w4_gemv_kernel<Tag, OutT><<<w.d.NB, 32 * warps, 0, stream>>>(
      w, static_cast<const typename Tag::T*>(x), M, ldx, static_cast<OutT*>(y), ldy, bias);
  CUDA_CHECK_LAUNCH("w4_gemv_kernel");
}

template <typename Tag, typename OutT>
void launch_w8_gemv(const W8View& w, const void* x, int M, int64_t ldx, void* y, int64_t ldy,
                    const float* bias, cudaStream_t stream, int warps) {
  w8_gemv_kernel<Tag, OutT><<<w.d.NB, 32 * warps, 0, stream>>>(
      w, static_cast<const typename Tag::T*>(x), M, ldx, static_cast<OutT*>(y), ldy, bias);
  CUDA_CHECK_LAUNCH("w8_gemv_kernel");
}

}  // namespace

std::string describe_gemv_kernels() {
  std::string r;
  for (int warps : {4, 8, 16}) {
    const std::string t = "<" + std::to_string(warps) + " warps>";
    r += describe_kernel(("w4_gemv<f16,f32>" + t).c_str(),
                         reinterpret_cast<const void*>(w4_gemv_kernel<F16, float>), 32 * warps, 0);
    r += describe_kernel(("w4_gemv<bf16,bf16>" + t).c_str(),
                         reinterpret_cast<const void*>(w4_gemv_kernel<BF16, __nv_bfloat16>),
                         32 * warps, 0);
    r += describe_kernel(("w8_gemv<f16,f32>" + t).c_str(),
                         reinterpret_cast<const void*>(w8_gemv_kernel<F16, float>), 32 * warps, 0);
  }
  return r;
}

void w4_gemv(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
             int64_t ldy, const float* bias, cudaStream_t stream, int warps) {
  check_linear_args("w4_gemv", w.d.N, w.d.K, x, xt, M, ldx, y, yt, ldy);
  PERFX_CHECK(M <= 8, "w4_gemv: M = " + std::to_string(M) + " > 8");
  if (M == 0) return;
  const int nw = gemv_warps(warps);
  if (xt == DType::F16) {
    if (yt == DType::F32)
      launch_w4_gemv<F16, float>(w, x, M, ldx, y, ldy, bias, stream, nw);
    else
      launch_w4_gemv<F16, __half>(w, x, M, ldx, y, ldy, bias, stream, nw);
  } else {
    if (yt == DType::F32)
      launch_w4_gemv<BF16, float>(w, x, M, ldx, y, ldy, bias, stream, nw);
    else
      launch_w4_gemv<BF16, __nv_bfloat16>(w, x, M, ldx, y, ldy, bias, stream, nw);
  }
}

void w8_gemv(const W8View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
             int64_t ldy, const float* bias, cudaStream_t stream, int warps) {
  check_linear_args("w8_gemv", w.d.N, w.d.K, x, xt, M, ldx, y, yt, ldy);
  PERFX_CHECK(M <= 8, "w8_gemv: M = " + std::to_string(M) + " > 8");
  if (M == 0) return;
  const int nw = gemv_warps(warps);
  if (xt == DType::F16) {
    if (yt == DType::F32)
      launch_w8_gemv<F16, float>(w, x, M, ldx, y, ldy, bias, stream, nw);
    else
      launch_w8_gemv<F16, __half>(w, x, M, ldx, y, ldy, bias, stream, nw);
  } else {
    if (yt == DType::F32)
      launch_w8_gemv<BF16, float>(w, x, M, ldx, y, ldy, bias, stream, nw);
    else
      launch_w8_gemv<BF16, __nv_bfloat16>(w, x, M, ldx, y, ldy, bias, stream, nw);
  }
}

}  // namespace perfx::cuda
