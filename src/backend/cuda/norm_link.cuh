// Device side of NormLink (linear.cuh): an add + RMSNorm between two decode GEMVs, done in the
// first one's epilogue (residual add, γ, per-CTA Σ s²) and the second one's (the 1/rms factor),
// so no kernel of the chain waits on a whole row (docs/cuda_linear_notes.md §22).
#pragma once

#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"

namespace perfx::cuda::normlink {

/// Asks L1 for the line holding p (no register, nothing waits for it).
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

/// Producer, after pdl_wait(): the residual (tokens < M) and γ lines of row block nb into L1,
/// for its epilogue. One warp calls it.
template <typename OutT>
__device__ __forceinline__ void producer_prefetch(const NormLink& nl, int M, int64_t nb,
                                                  int64_t N) {
  const int lane = threadIdx.x & 31;
  const int64_t r0 = nb * 16;
  if (r0 >= N) return;
  const int64_t r1 = min(r0 + 15, N - 1);
  if (lane < M) {
    const OutT* r = static_cast<const OutT*>(nl.res) + (int64_t)lane * nl.ldr;
    prefetch_l1(r + r0);
    prefetch_l1(r + r1);
  } else if (lane == 8) {
    prefetch_l1(nl.gamma + r0);
    prefetch_l1(nl.gamma + r1);
  }
}

/// Consumer, right after pdl_wait() and the first activation loads (whose latency this overlaps):
/// inv[t] = rsqrt(Σ_{j < n_part} part_in[t][j] / n + eps) / gscale for t < M (M <= 8), every
/// thread of the CTA loading a share (thread-strided, then by warp, then the warps in order: the
/// same order in every CTA of a launch). All threads of the CTA call it (two __syncthreads); inv
/// is the CTA's shared [8].
__device__ __forceinline__ void consumer_scales(const NormLink& nl, int M, float* inv) {
  __shared__ float part[8][32];  // per token, per warp (<= 32 warps)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int t = 0; t < M; ++t) {
    const float* p = nl.part_in + (int64_t)t * kNormParts;
    float s = 0.f;
    for (int j = threadIdx.x; j < nl.n_part; j += blockDim.x) s += p[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) part[t][warp] = s;
  }
  __syncthreads();
  if ((int)threadIdx.x < M) {
    float s = 0.f;
    for (int w = 0; w < nw; ++w) s += part[threadIdx.x][w];
    inv[threadIdx.x] = rsqrtf(s / (float)nl.n + nl.eps) / nl.gscale;
  }
  __syncthreads();
}

/// Producer, one output: s = round(res[token][row] + round(v)) into the residual, y = round(γ ·
/// gscale · s); returns s² (add_rms_norm's rounding: the residual is bit for bit the unfused
/// one's).
template <typename OutT>
__device__ __forceinline__ float produce(const NormLink& nl, int token, int64_t row, float v,
                                         OutT* __restrict__ y, int64_t ldy) {
  OutT* r = static_cast<OutT*>(nl.res) + (int64_t)token * nl.ldr + row;
  const float s = frag::round_to<OutT>(static_cast<float>(*r) + frag::round_to<OutT>(v));
  *r = frag::to_out<OutT>(s);
  y[(int64_t)token * ldy + row] = frag::to_out<OutT>(nl.gamma[row] * nl.gscale * s);
  return s * s;
}

/// Producer, the CTA's end: part_out[t][blockIdx.x] = Σ_{i < nrows} ss[i][t] for t < M (ss: the
/// CTA's per-row-lane sums in shared memory, [nrows][8]). All threads call it (a __syncthreads).
__device__ __forceinline__ void producer_store(const NormLink& nl, int M, const float (*ss)[8],
                                               int nrows) {
  __syncthreads();
  if ((int)threadIdx.x < M) {
    float t = 0.f;
    for (int i = 0; i < nrows; ++i) t += ss[i][threadIdx.x];
    nl.part_out[(int64_t)threadIdx.x * kNormParts + blockIdx.x] = t;
  }
}

}  // namespace perfx::cuda::normlink
