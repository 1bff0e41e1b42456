// Vectorised inner loops of the CPU backend, picked at run time (AVX2+FMA when the CPU has them,
// else the plain reference). Same contract as the reference functions in reference.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace perfx::cpu {

/// Σ a[i]·b[i] (fp32; summation order differs from dot_ref, so results differ by rounding).
float dot(const float* a, const float* b, int64_t n);
/// dequantize_row with F16C/AVX2 for F16/BF16 rows; falls back to the reference for other types.
void dequantize_row_fast(DType t, const void* src, float* dst, int64_t n);
/// Small-batch GEMV for 16-bit-float weights: out[t * ldo + r] = Σ_k x[t * ldx + k] · w_r[k] for
/// T <= 4 tokens and `rows` rows (row r at w + r * row_bytes, converted on the fly; rows may be
/// unaligned). Returns false (and does nothing) when T > 4 or there is no fast path for `t`.
bool dot_16bit_rows(const float* x, int64_t ldx, int T, const void* w, size_t row_bytes, DType t,
                   int64_t n, int64_t rows, float* out, int64_t ldo);
/// silu_mul_row with an AVX2 polynomial e^x (exp8 in avx2_util.h: relative error <= 3.5e-7 vs
/// libm's expf; NaN in g gives NaN; g = −inf gives −inf·u where the reference gives NaN).
void silu_mul_row_fast(const float* g, const float* u, int64_t n, float* out);
/// True when the AVX2+FMA path is in use.
bool have_avx2();

}  // namespace perfx::cpu
