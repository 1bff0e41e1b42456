// Plain reference kernels of the CPU backend: the numerical contract every other implementation is
// tested against. Single-threaded, fp32 arithmetic, weights read in their stored dtype.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace perfx::cpu {

/// Dequantizes n elements of one row stored as `t` (F32/F16/BF16/Q8_0/Q4_0/Q4_1, FORMATS.md §4.4;
/// GGUF k-quants Q4_K/Q5_K/Q6_K, super-blocks of 256 as ggml lays them out: Q4_K/Q5_K
/// W = d·sc_i·q − dmin·m_i over 8 sub-blocks of 32 with 6-bit sc/m, Q6_K W = d·sc_i·(q − 32)
/// over 16 sub-blocks of 16 with int8 sc) into dst. n must be a multiple of the block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);


/// Σ a[i]·b[i] in fp32.
float dot_ref(const float* a, const float* b, int64_t n);

/// out = x / sqrt(mean(x²) + eps) * w (HF LlamaRMSNorm, computed in fp32). x, out, w [n].
void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* out);

/// Rotates one head vector x [head_dim] at angle table (cos, sin) [rot_dim/2].
/// interleaved: pairs (2i, 2i+1) (GGUF 'llama'); else pairs (i, i + rot_dim/2) (HF rotate_half).
void rope_head(float* x, const float* cos, const float* sin, int rot_dim, bool interleaved);

/// silu(g) * u for n elements (SwiGLU; silu(g) = g / (1 + e^-g)).
void silu_mul_row(const float* g, const float* u, int64_t n, float* out);

/// Softmax over n scores in place (max-subtracted, fp32).
void softmax_inplace(float* x, int64_t n);

}  // namespace perfx::cpu
