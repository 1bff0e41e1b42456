// The SwiGLU activation, one definition for every kernel that applies it (the SwiGLU kernels and
// w4_gemv3's epilogue must agree bit for bit: the fused and unfused paths are interchangeable).
#pragma once

#include <cuda_runtime.h>

namespace perfx::cuda {

/// silu(g) · u = g / (1 + e^−g) · u in fp32 (Shazeer 2020, "GLU Variants Improve Transformer",
/// SwiGLU with β = 1; exp through __expf).
__device__ __forceinline__ float swiglu(float g, float u) {
  return g / (1.0f + __expf(-g)) * u;
}

}  // namespace perfx::cuda
