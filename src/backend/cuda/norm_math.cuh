// The RMSNorm arithmetic shared by the norm kernels (norm_kernels.cuh) and the decode GEMV's fused
// norm prologue (linear_gemv.cu, stage_x_norm): the block-wide sum, the vectorized kernel's chunk
// mapping (norm_vec_threads, norm_chunk_of), Σ x² of a chunk, 1/rms and the normalized chunk. Both
// call these, so they sum in the same order and round the same way: their results agree bit for bit
// (docs/cuda_linear_notes.md §30). RMSNorm: y = γ ⊙ x / sqrt(mean(x²) + eps) (Zhang & Sennrich
// 2019, arXiv 1910.07467).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cvt.cuh"

namespace perfx::cuda {

/// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
/// result. Order: an xor-shuffle tree within each warp, then the same tree over the warps' sums
/// (lanes past blockDim.x / 32 add 0.0f, so threads that pass 0.0f change nothing). Two
/// __syncthreads: every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

/// The thread count of the vectorized RMSNorm kernel for a row of n8 16-byte chunks (n / 8): one
/// chunk per thread up to 256 threads, then several (chunk i goes to thread i % threads).
__host__ __device__ __forceinline__ int norm_vec_threads(int n8) {
  return n8 >= 256 ? 256 : ((n8 + 31) / 32) * 32;
}

/// The 16-byte chunk (of n8) that this thread takes c-th in a norm of tv threads: chunk c·tv + t
/// for thread t < tv, or -1 (none: past the row, or a thread beyond tv).
__device__ __forceinline__ int norm_chunk_of(int c, int tv, int n8) {
  const int t = (int)threadIdx.x, i = c * tv + t;
  return t < tv && i < n8 ? i : -1;
}

/// ss += Σ v[k]² over one 16-byte chunk's 8 values, k ascending, one fused multiply-add each
/// (explicit, so the device and the CPU emulator round alike).
__device__ __forceinline__ void sumsq8(float& ss, const float (&v)[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) ss = fma_rn(v[k], v[k], ss);
}

/// 1 / rms of a row of n values from each thread's partial Σ x² (block_sum's order):
/// rsqrt(Σ / n + eps). Every thread of the block must call it (two __syncthreads).
__device__ __forceinline__ float rms_inv_of(float ss, int n, float eps) {
  return rsqrtf(block_sum(ss) / (float)n + eps);
}

/// One normalized chunk: γ[k] · (v[k] · inv) for the chunk's 8 values (γ as two float4), rounded
/// to T and packed.
template <typename T>
__device__ __forceinline__ uint4 norm_chunk(const float (&v)[8], float4 g0, float4 g1, float inv) {
  const float ww[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
  float r[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) r[k] = mul_rn(ww[k], mul_rn(v[k], inv));
  return pack8<T>(r);
}

}  // namespace perfx::cuda
