// The RMSNorm kernels (plain, with the residual add, and the vectorized one the decode path
// takes) and the vectorized kernel's launcher. Contracts: kernels.h (launch_rms_norm,
// launch_add_rms_norm). A header of their own so that the CPU emulator (tests/cuda/
// gemv_emulation_test.cpp) runs the vectorized kernel beside the decode GEMV's fused norm
// prologue, which must match it bit for bit (linear_gemv.cu, stage_x_norm).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cvt.cuh"
#include "backend/cuda/norm_math.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/trace.cuh"

namespace perfx::cuda {

constexpr int kNormThreads = 256;

template <typename T>
__global__ void rms_norm_kernel(const T* x, int64_t ldx, const float* __restrict__ w, float eps,
                                int64_t n, T* __restrict__ out, int64_t ldo) {
  PERFX_TRACE(kTrNorm, w);
  pdl_enter();
  const T* xr = x + (int64_t)blockIdx.x * ldx;
  T* o = out + (int64_t)blockIdx.x * ldo;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  const float inv = rms_inv_of(ss, (int)n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float g = w[i];  // nc-ok: γ, the norm weight, immutable
    o[i] = from_f<T>(g * (to_f(xr[i]) * inv));
  }
}

template <typename T>
__global__ void add_rms_norm_kernel(T* __restrict__ res, int64_t ldr, const T* x, int64_t ldx,
                                    const float* __restrict__ w, float eps, int64_t n,
                                    T* __restrict__ out, int64_t ldo) {
  PERFX_TRACE(kTrNorm, w);
  pdl_enter();
  T* r = res + (int64_t)blockIdx.x * ldr;
  const T* xr = x + (int64_t)blockIdx.x * ldx;
  T* o = out + (int64_t)blockIdx.x * ldo;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const T s = from_f<T>(to_f(r[i]) + to_f(xr[i]));
    r[i] = s;  // each thread rereads only what it wrote itself below
    const float v = to_f(s);
    ss += v * v;
  }
  const float inv = rms_inv_of(ss, (int)n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float g = w[i];  // nc-ok: γ, the norm weight, immutable
    o[i] = from_f<T>(g * (to_f(r[i]) * inv));
  }
}

// Vectorized norms: each thread keeps up to VPT 16-byte chunks (8 values) of the row in registers,
// so the row is read once and every load of a thread is issued before the first use (the scalar
// kernels above are latency-bound at one 2-byte load per iteration: ~10 us for a 4096-wide row).
// Their chunk mapping and arithmetic (norm_math.cuh) are shared with the decode GEMV's fused norm
// prologue (linear_gemv.cu: stage_x_norm), which must match them bit for bit.
template <typename T, int VPT>
__global__ void rms_norm_vec_kernel(const T* x, int64_t ldx, const T* res_in, int64_t ldr_in,
                                    T* res_out, int64_t ldr, const float* __restrict__ w, float eps,
                                    int n, T* __restrict__ out, int64_t ldo, bool early) {
  PERFX_TRACE(kTrNorm, w);
  // γ is a weight: loaded before the PDL wait (early: pdl_early_reads()), so its latency overlaps
  // the previous kernel.
  pdl_trigger();
  if (!early) pdl_wait();
  const int n8 = n / 8;
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float4 wv[VPT][2];
#pragma unroll
  for (int c = 0; c < VPT; ++c) {
    const int i = norm_chunk_of(c, blockDim.x, n8);
    if (i >= 0) {
      wv[c][0] = w4[2 * i];      // nc-ok: γ, the norm weight, immutable
      wv[c][1] = w4[2 * i + 1];  // nc-ok: γ
    }
  }
  if (early) pdl_wait();
  const int64_t row = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * ldx);
  const uint4* rr = res_in ? reinterpret_cast<const uint4*>(res_in + row * ldr_in) : nullptr;
  float v[VPT][8];
  uint4 raw[VPT], raw2[VPT];
#pragma unroll
  for (int c = 0; c < VPT; ++c) {
    const int i = norm_chunk_of(c, blockDim.x, n8);
    if (i >= 0) {
      raw[c] = xr[i];
      if (rr) raw2[c] = rr[i];
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < VPT; ++c) {
    const int i = norm_chunk_of(c, blockDim.x, n8);
    if (i < 0) continue;
    unpack8<T>(raw[c], v[c]);
    if (rr) {  // residual += x, rounded to T (the stored residual is what the norm reads)
      float r[8];
      unpack8<T>(raw2[c], r);
#pragma unroll
      for (int k = 0; k < 8; ++k) v[c][k] = r[k] + v[c][k];
      const uint4 s = pack8<T>(v[c]);
      reinterpret_cast<uint4*>(res_out + row * ldr)[i] = s;
      unpack8<T>(s, v[c]);
    }
    sumsq8(ss, v[c]);
  }
  const float inv = rms_inv_of(ss, n, eps);
  uint4* o = reinterpret_cast<uint4*>(out + row * ldo);
#pragma unroll
  for (int c = 0; c < VPT; ++c) {
    const int i = norm_chunk_of(c, blockDim.x, n8);
    if (i < 0) continue;
    o[i] = norm_chunk<T>(v[c], wv[c][0], wv[c][1], inv);
  }
}

/// Launches the vectorized norm when the shapes allow (n % 8 == 0, n <= 8 · 256 · 8, 16-byte
/// aligned rows); returns false otherwise.
template <typename T>
bool launch_norm_vec(const T* x, int64_t ldx, const T* res_in, int64_t ldr_in, T* res_out,
                     int64_t ldr, const float* w, float eps, int rows, int64_t n, T* out,
                     int64_t ldo, cudaStream_t stream) {
  auto al = [](const void* p) { return ((uintptr_t)p & 15) == 0; };
  if (n % 8 != 0 || n > 8 * 256 * 8 || ldx % 8 || ldo % 8 || !al(x) || !al(out) || !al(w))
    return false;
  if (res_in && (ldr % 8 || ldr_in % 8 || !al(res_in) || !al(res_out))) return false;
  const int n8 = (int)(n / 8);
  const int threads = norm_vec_threads(n8);
  const int vpt = (n8 + threads - 1) / threads;
#define PERFX_NORM_VEC(V)                                                                     \
  launch_pdl(rms_norm_vec_kernel<T, V>, dim3(rows), dim3(threads), 0, stream, x, ldx, res_in, \
             ldr_in, res_out, ldr, w, eps, (int)n, out, ldo, pdl_early_reads())
  if (vpt <= 1)
    PERFX_NORM_VEC(1);
  else if (vpt <= 2)
    PERFX_NORM_VEC(2);
  else if (vpt <= 4)
    PERFX_NORM_VEC(4);
  else
    PERFX_NORM_VEC(8);
#undef PERFX_NORM_VEC
  return true;
}

}  // namespace perfx::cuda
