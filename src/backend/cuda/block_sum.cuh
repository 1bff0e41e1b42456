// Block-wide fp32 sum shared by the RMSNorm kernels (kernels.cu) and the decode GEMV's fused norm
// prologue (linear_gemv.cu), so that both sum Σ x² in the same order: their results then agree bit
// for bit (docs/cuda_linear_notes.md §30).
#pragma once

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

}  // namespace perfx::cuda
