// W4A16 (int4 weights, group-wise scale and zero; fp32 activations on the CPU) linear kernels over
// the canonical Int4Matrix the loader decodes (AutoAWQ, formats/awq.h); kernels dequantize inside
// the dot product (never a full fp copy of the weight). Reference + AVX2 (picked at run time).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/quantized.h"

namespace perfx::cpu {

/// The CPU kernels read the canonical int4 form directly (core/quantized.h: nibbles in natural
/// order, fp16 scales and uint8 zeros per group; 3 bytes per 128 weights, +4.7% over the nibbles,
/// which keeps a Llama-2-7B AWQ g128 model within the 3.9 GB RSS budget of issue 4). `mins`
/// (GGUF Q4_1) is not supported here: the backend keeps such weights in their block format.
using W4A16Matrix = Int4Matrix;

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
