// fp16 / bf16 <-> fp32 conversions for the CUDA kernels templated on the activation type T
// (round to nearest even when narrowing), and fp32 products rounded explicitly (mul_rn, fma_rn).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

namespace perfx::cuda {

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

/// Eight T values packed in 16 bytes, to fp32 (unpack8) and back, rounded (pack8).
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f(h[i]);
}
template <typename T>
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 u;
  T* h = reinterpret_cast<T*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = from_f<T>(f[i]);
  return u;
}

/// a * b and a * b + c, each rounded once (fp32): the same on the device and in the CPU emulator
/// (PERFX_CUDA_EMULATION), with no contraction choice left to the compiler.
__device__ __forceinline__ float mul_rn(float a, float b) {
#if defined(PERFX_CUDA_EMULATION)
  return a * b;
#else
  return __fmul_rn(a, b);
#endif
}
__device__ __forceinline__ float fma_rn(float a, float b, float c) {
#if defined(PERFX_CUDA_EMULATION)
  return std::fma(a, b, c);
#else
  return __fmaf_rn(a, b, c);
#endif
}

}  // namespace perfx::cuda
