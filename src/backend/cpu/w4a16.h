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
/// Memory budget (issue 4): a Llama-2-7B AWQ g128 model must run in <= 3.9 GB RSS, so scales and
/// zeros are stored in 16 + 8 bits per group (3 bytes per 128 weights, +4.7% over the nibbles).
struct W4A16Matrix {
  int64_t out = 0, in = 0;
  int group_size = 128;          // a multiple of 8 dividing `in`
  std::vector<uint32_t> q;       // [out, in / 8]: nibble i (bits 4i..4i+3) of word c = W[r, 8c + i]
  std::vector<uint16_t> scales;  // [out, in / group_size] IEEE fp16 bits
  std::vector<uint8_t> zeros;    // [out, in / group_size] in [0, 15]; W = (q − zero) · scale
  size_t bytes() const {
    return q.size() * sizeof(uint32_t) + scales.size() * sizeof(uint16_t) + zeros.size();
  }
};

/// Repacks an AutoAWQ linear (src.awq_version "gemm" or "gemv", FORMATS.md §2.3/§2.4) into the CPU
/// layout. qweight/qzeros: I32; scales: F16 (or BF16, converted exactly when in fp16 range).
/// src.group_size <= 0 means one group per row (AutoAWQ's −1). Tensors may be unaligned.
/// Throws perfx::Error for wrong shapes/dtypes (naming the tensor), in % group_size != 0,
/// group_size % 8 != 0 or an unknown version. Afterwards the pages wholly inside the source
/// tensors are advised out (MADV_PAGEOUT; non-destructive) so a mmapped checkpoint does not stay
/// resident next to its repacked copy.
W4A16Matrix repack_awq(const LinearSource& src);

/// For output rows r in [r0, r1) and tokens t < T: y[t*ldy + r] = Σ_k x[t*ldx + k] · W[r, k]
/// (note: y is indexed by the absolute row r; pass y already offset for a fused part).
/// x: fp32 [T, ldx]; W[r, k] = (q − zero) · scale in fp32. Plain reference (the numerical
/// contract): per element w = (float(q) − float(zero)) · scale, summed in k order in fp32.
void w4a16_linear_ref(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                      int64_t r1, float* y, int64_t ldy);
/// Same contract, fastest available kernel for this CPU (AVX2+FMA+F16C when present, chosen once
/// with __builtin_cpu_supports; PERFX_W4A16_REF=1 in the environment forces the reference).
/// Calls with T <= w4a16_q8_max_tokens() use int8 activations (w4a16_linear_avx2_q8, error bound
/// there; off by default); the others use fp32 activations and differ from the reference only by
/// summation order.
void w4a16_linear(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0, int64_t r1,
                  float* y, int64_t ldy);

/// True when w4a16_linear uses the AVX2 kernels.
bool w4a16_have_avx2();
/// Largest T for which w4a16_linear quantizes activations to int8: 0 (never) by default; the
/// environment variable PERFX_W4A16_Q8 sets it once per process ("8" = decode-sized calls,
/// "all" = always, which keeps results independent of how tokens are batched).
int w4a16_q8_max_tokens();
/// The AVX2 kernels directly (tests and benchmarks); only call when w4a16_have_avx2().
/// T <= 8 uses a fused kernel (nibbles widened in registers, up to 4 tokens per pass over the
/// weights); larger T dequantizes panels of 16 rows × 256 columns and runs the shared blocked
/// GEMM of gemm.h over them.
void w4a16_linear_avx2(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                       int64_t r1, float* y, int64_t ldy);
/// Variant with int8 activations (only call when w4a16_have_avx2()): x is quantized per (token,
/// group) to int8 with d = max|x| / 127 (round half to even) and each group's Σ q·x runs on
/// integer multiply-adds: y = Σ_g s_g·d_g·(Σ q·xq − z_g·Σ xq). Error vs the reference
/// ≤ Σ_k |W[r,k]| · d_g(k) / 2 plus fp32 rounding. Any T (tiles of up to 4 tokens, each a pass over
/// the weights); falls back to w4a16_linear_avx2 when group_size % 64 != 0.
void w4a16_linear_avx2_q8(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                          int64_t r1, float* y, int64_t ldy);

}  // namespace perfx::cpu
