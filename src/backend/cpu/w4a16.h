// W4A16 (AWQ int4 weights, group-wise scale and zero; fp32 activations on the CPU) linear kernels.
// The AutoAWQ tensors are repacked once at load into `W4A16Matrix`; kernels dequantize inside the
// dot product (never a full fp copy of the weight). Reference + AVX2 (picked at run time).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace perfx::cpu {

/// CPU layout of an int4 matrix [out, in] with groups of `group_size` input channels.
/// Layout details are private to w4a16.cpp; only the kernels below read them.
struct W4A16Matrix {
  int64_t out = 0, in = 0;
  int group_size = 128;
  std::vector<uint8_t> q;      // packed nibbles (kernel layout)
  std::vector<float> scales;   // [out, in / group_size]
  std::vector<float> zeros;    // [out, in / group_size] (as float; w = (q - zero) * scale)
  size_t bytes() const { return q.size() + (scales.size() + zeros.size()) * sizeof(float); }
};

/// Repacks an AutoAWQ linear (src.awq_version "gemm" or "gemv", FORMATS.md §2.3/§2.4) into the CPU
/// layout. Throws perfx::Error for wrong shapes/dtypes (naming the tensor) or in % group_size != 0.
W4A16Matrix repack_awq(const LinearSource& src);

/// y[t, r - r0] for output rows r in [r0, r1): y[t*ldy + r] = Σ_k x[t*ldx + k] · W[r, k], t < T.
/// Plain reference (the numerical contract).
void w4a16_linear_ref(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                      int64_t r1, float* y, int64_t ldy);
/// Same contract, fastest available kernel for this CPU (AVX2+FMA when present).
void w4a16_linear(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0, int64_t r1,
                  float* y, int64_t ldy);

}  // namespace perfx::cpu
