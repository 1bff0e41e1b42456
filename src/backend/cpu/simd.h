// Vectorised inner loops of the CPU backend, picked at run time (AVX2+FMA when the CPU has them,
// else the plain reference). Same contract as the reference functions in reference.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace perfx::cpu {

/// Σ a[i]·b[i] (fp32; summation order differs from dot_ref, so results differ by rounding).
float dot(const float* a, const float* b, int64_t n);
/// y[i] += a * x[i].
void axpy(float a, const float* x, float* y, int64_t n);
/// dequantize_row with F16C/AVX2 for F16/BF16 rows; falls back to the reference for other types.
void dequantize_row_fast(DType t, const void* src, float* dst, int64_t n);
/// *out = Σ x[i]·w[i] for a F16/BF16 row w converted on the fly. Returns false (and does nothing)
/// when no fast path exists for `t` on this CPU.
bool dot_half(const float* x, const void* w, DType t, int64_t n, float* out);
/// True when the AVX2+FMA path is in use.
bool have_avx2();

}  // namespace perfx::cpu
