// Internal to the linear kernels: the layout's index arithmetic (host + device, so the packer,
// the tests' host emulation and the kernels share one definition) and the device primitives
// (int4/int8 → fp16/bf16 fragment conversion, mma.sync, cp.async). See linear.cuh for the layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/l2_prefetch_plan.h"

#if defined(__CUDACC__)
#define PERFX_HD __host__ __device__ __forceinline__
#else
#define PERFX_HD inline
#endif

#if defined(PERFX_CUDA_EMULATION)
// The CPU emulator's (tests/cuda/cuda_emu.h) stand-ins for the device-only primitives below.
void perfx_emu_mma16816(bool bf16, float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
void perfx_emu_check_global(const void* p, size_t n);
void* perfx_emu_dyn_smem();
#endif

namespace perfx::cuda::frag {

// ------------------------------------------------------------------------- W4 element placement
//
// In lane (gid, tid)'s word j of chunk kc, element e (0..7) is at nibble w4_nibble(e) and stands
// for row 16nb + gid + 8·w4_elem_hi(e), channel w4_base(kc, j, tid) + w4_elem_koff(e).

/// Nibble position of element e: nibble i holds e[{0,2,4,6,1,3,5,7}[i]], so e → (e&1)·4 + e/2.
PERFX_HD int w4_nibble(int e) {
  return ((e & 1) << 2) | (e >> 1);
}
/// 1 when element e belongs to row gid + 8 (e = 2, 3, 6, 7).
PERFX_HD int w4_elem_hi(int e) {
  return (e >> 1) & 1;
}
/// Channel offset of element e from the word's base: e0..e7 → 0,1,0,1,2,3,2,3.
PERFX_HD int w4_elem_koff(int e) {
  return ((e >> 2) << 1) | (e & 1);
}
/// Element index for (row half hi, channel offset koff 0..3): inverse of the two above.
PERFX_HD int w4_elem(int hi, int koff) {
  return ((koff >> 1) << 2) | (hi << 1) | (koff & 1);
}
/// First real input channel of word j (k-tile j, 0..3) of chunk kc for lane tid.
PERFX_HD int64_t w4_base(int64_t kc, int j, int tid) {
  return 64 * kc + 32 * (j >> 1) + 8 * tid + 4 * (j & 1);
}
/// uint4 index of (row block nb, chunk kc, lane) in q.
PERFX_HD int64_t w4_q_index(int KC, int64_t nb, int64_t kc, int lane) {
  return (nb * KC + kc) * 32 + lane;
}
/// uint2 index of (row block nb, group g, gid) in sz.
PERFX_HD int64_t w4_sz_index(int G, int64_t nb, int64_t g, int gid) {
  return (nb * G + g) * 8 + gid;
}
/// Group of half-chunk hc (= 2kc + h, 32 channels each) for group_size = 32 << gs_shift.
PERFX_HD int64_t w4_group_of_half(int64_t hc, int gs_shift) {
  return hc >> gs_shift;
}
/// The zeros of a symmetric record's halves (8 for row gid and for row gid + 8, as .y holds them).
constexpr uint32_t kW4SymZeros = 0x0808u;
/// uint2 index in sz of the record serving half-chunk hc of row block nb for lane group gid:
/// group hc >> gs_shift, or with symmetric records (W4Dims::sym) chunk hc >> 1.
PERFX_HD int64_t w4_rec_index(int G, int gs_shift, bool sym, int64_t nb, int64_t hc, int gid) {
  return w4_sz_index(G, nb, sym ? hc >> 1 : w4_group_of_half(hc, gs_shift), gid);
}
/// Half-chunk hc's scales and zeros in the asymmetric record's form (.x scales, .y zeros) from
/// the record w4_rec_index names: itself, or for a symmetric one its .x (hc even) or .y with the
/// zeros 8.
PERFX_HD uint2 w4_rec_of_half(uint2 r, bool sym, int64_t hc) {
  return sym ? make_uint2((hc & 1) ? r.y : r.x, kW4SymZeros) : r;
}

// ------------------------------------------------------------------------- W4A8 (int8 activations)
//
// A word's low nibbles are row gid's four weights at channels b + {0, 2, 1, 3} (b = w4_base), its
// high nibbles row gid + 8's: each is an m16n8k32 u8 A-fragment register as it stands. The int8
// activations are stored in the same channel order, 4 channels per 32-bit word.

/// The u8 A register of row gid (hi = 0) or gid + 8 (hi = 1) from a packed word.
PERFX_HD uint32_t w4a8_a_reg(uint32_t w, int hi) {
  return (hi ? w >> 4 : w) & 0x0F0F0F0Fu;
}
/// Four consecutive quantized channels q0..q3 as stored: bytes q0, q2, q1, q3 (byte 0 lowest).
PERFX_HD uint32_t a8_store4(int q0, int q1, int q2, int q3) {
  return (uint32_t)(q0 & 0xFF) | (uint32_t)(q2 & 0xFF) << 8 | (uint32_t)(q1 & 0xFF) << 16 |
         (uint32_t)(q3 & 0xFF) << 24;
}

// ------------------------------------------------------------------------- W8 element placement
//
// Lane (gid, tid) of chunk kc (32 channels): word w (0..3) of its uint4, byte y (0..3):
// k-tile jj = w / 2, channel w8_base(kc, jj, tid) + 2·(w & 1) + (y & 1), row gid + 8·(y >> 1).

PERFX_HD int64_t w8_base(int64_t kc, int jj, int tid) {
  return 32 * kc + 8 * tid + 4 * jj;
}
PERFX_HD int64_t w8_q_index(int KC, int64_t nb, int64_t kc, int lane) {
  return (nb * KC + kc) * 32 + lane;
}
PERFX_HD int64_t w8_s_index(int G, int64_t nb, int64_t g, int gid) {
  return (nb * G + g) * 8 + gid;
}

// ------------------------------------------------------------------------- bit-level conversions
//
// fp16: 0x6400 | v is 1024 + v for v < 1024 (ulp 1 in [1024, 2048)); 0x5400 | v << 4 is
// 64 + v (ulp 1/16 in [64, 128)). bf16: 0x4300 | v is 128 + v for v < 128. All sums below are of
// small integers, hence exact.

/// (a & b) | c, the lop3 immediate 0xEA.
PERFX_HD uint32_t lop_and_or(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return (a & b) | c;
#endif
}

/// fp16x2 bits of −(1024 + z) in both halves (z in 0..15): added to 0x6400 | q gives q − z.
PERFX_HD uint32_t f16_neg_zero_lo(uint32_t z) {
  return 0xE400E400u | (z * 0x00010001u);
}
/// fp16x2 bits of −(64 + z) in both halves: fma(0x6400 | q << 4, 1/16, this) = q − z.
PERFX_HD uint32_t f16_neg_zero_hi(uint32_t z) {
  return 0xD400D400u | ((z << 4) * 0x00010001u);
}
/// bf16x2 bits of −(128 + z) in both halves: added to 0x4300 | q gives q − z.
PERFX_HD uint32_t bf16_neg_zero(uint32_t z) {
  return 0xC300C300u | (z * 0x00010001u);
}

/// Host stand-ins for the half2 arithmetic (used by the host emulation in the tests). Only
/// called with exactly representable results, so float arithmetic + exact conversion suffices.
#if !defined(__CUDA_ARCH__)
inline float host_half_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
inline uint16_t host_float_to_half(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
inline float host_bf16_to_float(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}
inline uint16_t host_float_to_bf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
#endif

/// fp16x2 a + b.
PERFX_HD uint32_t f16x2_add(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  const float lo = host_half_to_float((uint16_t)a) + host_half_to_float((uint16_t)b);
  const float hi =
      host_half_to_float((uint16_t)(a >> 16)) + host_half_to_float((uint16_t)(b >> 16));
  return host_float_to_half(lo) | ((uint32_t)host_float_to_half(hi) << 16);
#endif
}
/// fp16x2 a · b + c.
PERFX_HD uint32_t f16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  const float lo = host_half_to_float((uint16_t)a) * host_half_to_float((uint16_t)b) +
                   host_half_to_float((uint16_t)c);
  const float hi =
      host_half_to_float((uint16_t)(a >> 16)) * host_half_to_float((uint16_t)(b >> 16)) +
      host_half_to_float((uint16_t)(c >> 16));
  return host_float_to_half(lo) | ((uint32_t)host_float_to_half(hi) << 16);
#endif
}
/// bf16x2 a · b + c.
PERFX_HD uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  const float lo = host_bf16_to_float((uint16_t)a) * host_bf16_to_float((uint16_t)b) +
                   host_bf16_to_float((uint16_t)c);
  const float hi =
      host_bf16_to_float((uint16_t)(a >> 16)) * host_bf16_to_float((uint16_t)(b >> 16)) +
      host_bf16_to_float((uint16_t)(c >> 16));
  return host_float_to_bf16(lo) | ((uint32_t)host_float_to_bf16(hi) << 16);
#endif
}

/// fp16x2 a · b (one rounding).
PERFX_HD uint32_t f16x2_mul(uint32_t a, uint32_t b) {
  return f16x2_fma(a, b, 0x80008000u);
}
/// bf16x2 a · b (one rounding; + −0 keeps every product unchanged).
PERFX_HD uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  return bf16x2_fma(a, b, 0x80008000u);
}

constexpr uint32_t kF16x2One16th = 0x2C002C00u;  // 1/16 in both halves
constexpr uint32_t kBf16x2One = 0x3F803F80u;     // 1.0 in both halves

/// Activation type tags for the templates.
struct F16 {
  using T = __half;
};
struct BF16 {
  using T = __nv_bfloat16;
};

/// The 4 A-fragment registers (q − zero, exact) of one packed int4 word, fp16.
/// z_lo = f16_neg_zero_lo(zero of row gid), z_hi = f16_neg_zero_hi(zero of row gid + 8).
PERFX_HD void w4_word_to_frag_f16(uint32_t w, uint32_t z_lo, uint32_t z_hi, uint32_t a[4]) {
  const uint32_t w8 = w >> 8;
  const uint32_t h0 = lop_and_or(w, 0x000F000Fu, 0x64006400u);   // 1024 + (e0, e1)
  const uint32_t h1 = lop_and_or(w, 0x00F000F0u, 0x64006400u);   // 1024 + 16·(e2, e3)
  const uint32_t h2 = lop_and_or(w8, 0x000F000Fu, 0x64006400u);  // 1024 + (e4, e5)
  const uint32_t h3 = lop_and_or(w8, 0x00F000F0u, 0x64006400u);  // 1024 + 16·(e6, e7)
  a[0] = f16x2_add(h0, z_lo);
  a[1] = f16x2_fma(h1, kF16x2One16th, z_hi);
  a[2] = f16x2_add(h2, z_lo);
  a[3] = f16x2_fma(h3, kF16x2One16th, z_hi);
}

/// Same for bf16: z_lo / z_hi = bf16_neg_zero(zero of row gid / gid + 8).
PERFX_HD void w4_word_to_frag_bf16(uint32_t w, uint32_t z_lo, uint32_t z_hi, uint32_t a[4]) {
  const uint32_t h0 = lop_and_or(w, 0x000F000Fu, 0x43004300u);        // 128 + (e0, e1)
  const uint32_t h1 = lop_and_or(w >> 4, 0x000F000Fu, 0x43004300u);   // 128 + (e2, e3)
  const uint32_t h2 = lop_and_or(w >> 8, 0x000F000Fu, 0x43004300u);   // 128 + (e4, e5)
  const uint32_t h3 = lop_and_or(w >> 12, 0x000F000Fu, 0x43004300u);  // 128 + (e6, e7)
  a[0] = bf16x2_fma(h0, kBf16x2One, z_lo);
  a[1] = bf16x2_fma(h1, kBf16x2One, z_hi);
  a[2] = bf16x2_fma(h2, kBf16x2One, z_lo);
  a[3] = bf16x2_fma(h3, kBf16x2One, z_hi);
}

// ------------------------------------------------------------------------- folded-zero conversions
//
// The v2 GEMV (linear_gemv2.cu) leaves the zero point and any conversion offset out of the A
// fragment and corrects the fp32 mma sum once per group with the group's activation sum X:
//   Σ_k (q − z)·x = A_r · c_r − (B_r + z) · X,   c_r = Σ_k frag_r(q)·x (the mma result)
// for the fragment's row half r (lo = rows gid, A regs 0, 2; hi = rows gid + 8, A regs 1, 3).
// Each word costs one shift + four lop3 (fp16) or three shifts + four lop3 (bf16), no fp ops.
//   kFoldMagicF16: 0x6400 | q = 1024 + q (lo), 0x6400 | q << 4 = 1024 + 16q (hi):
//                  A = 1, 1/16; B = 1024, 64. Exact products; the mma's fp32 sum carries the
//                  1024·X offset, so its rounding is relative to ~1024·Σ|x| (see the notes).
//   kFoldSubF16:   q · 2^-24 (lo) and q · 2^-20 (hi) as fp16 subnormals (a plain AND):
//                  A = 2^24, 2^20; B = 0. Exact, no offset; needs subnormal fp16 mma inputs.
//   kFoldMagicBf16: 0x4300 | q = 128 + q for all four: A = 1, B = 128.
enum FoldConv : int { kFoldMagicF16 = 0, kFoldSubF16 = 1, kFoldMagicBf16 = 2 };

/// The 4 A registers of one packed word for conversion `conv` (see above).
PERFX_HD void w4_word_to_frag_fold(int conv, uint32_t w, uint32_t a[4]) {
  if (conv == kFoldMagicBf16) {
    a[0] = lop_and_or(w, 0x000F000Fu, 0x43004300u);        // 128 + (e0, e1)
    a[1] = lop_and_or(w >> 4, 0x000F000Fu, 0x43004300u);   // 128 + (e2, e3)
    a[2] = lop_and_or(w >> 8, 0x000F000Fu, 0x43004300u);   // 128 + (e4, e5)
    a[3] = lop_and_or(w >> 12, 0x000F000Fu, 0x43004300u);  // 128 + (e6, e7)
    return;
  }
  const uint32_t or_bits = conv == kFoldSubF16 ? 0u : 0x64006400u;
  const uint32_t w8 = w >> 8;
  a[0] = lop_and_or(w, 0x000F000Fu, or_bits);   // (e0, e1):  1024 + q   | q·2^-24
  a[1] = lop_and_or(w, 0x00F000F0u, or_bits);   // (e2, e3):  1024 + 16q | q·2^-20
  a[2] = lop_and_or(w8, 0x000F000Fu, or_bits);  // (e4, e5)
  a[3] = lop_and_or(w8, 0x00F000F0u, or_bits);  // (e6, e7)
}
/// A_r of conversion conv for row half hi (0: rows gid, 1: rows gid + 8).
PERFX_HD float fold_scale(int conv, int hi) {
  return conv == kFoldSubF16     ? (hi ? 1048576.0f : 16777216.0f)
         : conv == kFoldMagicF16 ? (hi ? 0.0625f : 1.0f)
                                 : 1.0f;
}
/// B_r of conversion conv for row half hi.
PERFX_HD float fold_offset(int conv, int hi) {
  return conv == kFoldSubF16 ? 0.0f : conv == kFoldMagicF16 ? (hi ? 64.0f : 1024.0f) : 128.0f;
}

/// Byte permute (PTX prmt / __byte_perm): result byte i = byte sel_i of {b, a} (a bytes 0..3).
PERFX_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, sel);
#else
  const uint64_t v = ((uint64_t)b << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= (uint32_t)((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

/// int8 (stored q + 128) bytes 0,1 and 2,3 of a word → two fp16x2 of q (exact):
/// 0x64 | byte is 1024 + (q + 128); adding −1152 (0xE480) leaves q.
PERFX_HD void w8_word_to_f16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = f16x2_add(byte_perm(w, 0x64646464u, 0x5140u), 0xE480E480u);
  hi = f16x2_add(byte_perm(w, 0x64646464u, 0x5342u), 0xE480E480u);
}

/// Same to bf16x2 through fp32: 0x4B000000 | byte is 2^23 + (q + 128); subtract 2^23 + 128.
PERFX_HD uint32_t f32_pair_to_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return host_float_to_bf16(lo) | ((uint32_t)host_float_to_bf16(hi) << 16);
#endif
}
PERFX_HD float u32_as_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}
PERFX_HD void w8_word_to_bf16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  constexpr float kBias = 8388736.0f;  // 2^23 + 128
  const float q0 = u32_as_f32(byte_perm(w, 0x4B000000u, 0x7540u)) - kBias;
  const float q1 = u32_as_f32(byte_perm(w, 0x4B000000u, 0x7541u)) - kBias;
  const float q2 = u32_as_f32(byte_perm(w, 0x4B000000u, 0x7542u)) - kBias;
  const float q3 = u32_as_f32(byte_perm(w, 0x4B000000u, 0x7543u)) - kBias;
  lo = f32_pair_to_bf16x2(q0, q1);
  hi = f32_pair_to_bf16x2(q2, q3);
}

// ------------------------------------------------------------------------- device-only primitives
// (also compiled by the CPU emulator, PERFX_CUDA_EMULATION, which supplies the mma and the checked
// loads; the cp.async helpers are not emulated)
#if defined(__CUDACC__) || defined(PERFX_CUDA_EMULATION)

/// D = A·B + C, m16n8k16, fp32 accumulate; A/B fp16 (F16) or bf16 (BF16).
template <typename Tag>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<F16>(float c[4], const uint32_t a[4], uint32_t b0,
                                              uint32_t b1) {
#if defined(PERFX_CUDA_EMULATION)
  perfx_emu_mma16816(false, c, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <>
__device__ __forceinline__ void mma16816<BF16>(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
#if defined(PERFX_CUDA_EMULATION)
  perfx_emu_mma16816(true, c, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/// The L2 cache policy for a kernel's streamed weights (an `.L2::cache_hint` operand):
/// evict-first when `evict_first` (weights are read once a step and should not push the KV
/// cache, the activations and the norms' γ out of L2; docs/cuda_linear_notes.md §31), else
/// evict-normal (which on the H100 kept more weight lines than an unhinted load does: §31's
/// measurement). PTX ISA, "createpolicy".
__device__ __forceinline__ uint64_t l2_stream_policy(bool evict_first) {
#if defined(PERFX_CUDA_EMULATION)
  return evict_first ? 1 : 0;
#else
  uint64_t pol;
  if (evict_first)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  else
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  return pol;
#endif
}

/// 16-byte global load, streaming (evict-first): weights are read once per pass.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
#if defined(PERFX_CUDA_EMULATION)
  perfx_emu_check_global(p, 16);
  return *p;
#else
  return __ldcs(p);
#endif
}
/// 16-byte global load of streamed weights: non-coherent path, no L1 allocation, 256-byte L2
/// prefetch (a warp's 512-byte quad row is contiguous). Not volatile: the compiler may schedule it.
/// Weights only: the read-only path is wrong for anything a kernel writes (pdl.cuh).
__device__ __forceinline__ uint4 ld_weight_nc(const uint4* p) {
#if defined(PERFX_CUDA_EMULATION)
  perfx_emu_check_global(p, 16);
  return *p;
#else
  uint4 r;
  // nc-ok: packed weights, immutable
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
#endif
}

#if !defined(PERFX_CUDA_EMULATION)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
/// cp.async 16 bytes global → shared, zero-filling when !valid (no global read then).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

/// L2 warming (docs/cuda_linear_notes.md §26): this thread's share of pf's ranges (16-byte units
/// dealt round-robin over the grid's threads, so a warp reads 512 contiguous bytes) copied with
/// cp.async.ca into the thread's own 16-byte slot of `scratch` (shared, one slot a thread, never
/// read back): the lines stay in L2 for the kernel that reads the range next, and the thread
/// does not wait for them. The prefetch instructions (cp.async.bulk.prefetch.L2,
/// prefetch.global.L2) and cp.async.cg (with or without an evict_last policy) left nothing in L2
/// on the H200 (bench/cuda/l2_prefetch_probe.cu). Call l2_warm_drain(pf) before the kernel exits;
/// no other cp.async group may be pending across the two calls.
__device__ __forceinline__ void l2_warm_share(const L2Prefetch& pf, uint4* scratch) {
  const uint32_t slot = smem_u32(scratch + threadIdx.x);
  const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4* base = static_cast<const uint4*>(pf.p[r]);
    const uint32_t units = pf.n[r] / 16;
    for (uint32_t i = first; i < units; i += stride)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(slot), "l"(base + i)
                   : "memory");
  }
}
/// Waits for l2_warm_share(pf, ...)'s copies (nothing to wait for when pf is empty).
__device__ __forceinline__ void l2_warm_drain(const L2Prefetch& pf) {
  if ((pf.n[0] | pf.n[1]) != 0) asm volatile("cp.async.wait_all;" ::: "memory");
}
#else   // the emulator: L2 warming is a hint with no effect on results, so nothing to do
inline void l2_warm_share(const L2Prefetch&, uint4*) {}
inline void l2_warm_drain(const L2Prefetch&) {}
#endif  // !PERFX_CUDA_EMULATION

/// fp32 → output element.
template <typename O>
__device__ __forceinline__ O to_out(float v);
template <>
__device__ __forceinline__ float to_out<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half to_out<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_out<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/// v rounded to O's precision (to_out), back in fp32 (float: v itself).
template <typename O>
__device__ __forceinline__ float round_to(float v) {
  return static_cast<float>(to_out<O>(v));
}

/// Low / high fp16 of a packed pair as fp32.
__device__ __forceinline__ float f16_lo(uint32_t v) {
  return __half2float(__ushort_as_half((unsigned short)(v & 0xFFFFu)));
}
__device__ __forceinline__ float f16_hi(uint32_t v) {
  return __half2float(__ushort_as_half((unsigned short)(v >> 16)));
}

/// The zero-point constants w4_word_to_frag_f16 / _bf16 take, from a scale/zero record's .y
/// (zero of row gid in bits 0-3, of row gid + 8 in bits 8-11).
template <typename Tag>
__device__ __forceinline__ void w4_neg_zeros(uint32_t zy, uint32_t& z_lo, uint32_t& z_hi) {
  const uint32_t zl = zy & 0xFu, zh = (zy >> 8) & 0xFu;
  if constexpr (std::is_same_v<Tag, F16>) {
    z_lo = f16_neg_zero_lo(zl);
    z_hi = f16_neg_zero_hi(zh);
  } else {
    z_lo = bf16_neg_zero(zl);
    z_hi = bf16_neg_zero(zh);
  }
}

/// c += (q − z) · x over half-chunk h of a lane's quad: words 2h, 2h + 1 (two k-tiles) against
/// the lane's activations xh (16 bytes: x[gid][64kc + 32h + 8tid .. +7]).
template <typename Tag>
__device__ __forceinline__ void w4_half_mma(float c[4], const uint32_t words[4], int h,
                                            uint32_t z_lo, uint32_t z_hi, const uint4& xh) {
#pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    uint32_t a[4];
    if constexpr (std::is_same_v<Tag, F16>)
      w4_word_to_frag_f16(words[2 * h + jj], z_lo, z_hi, a);
    else
      w4_word_to_frag_bf16(words[2 * h + jj], z_lo, z_hi, a);
    mma16816<Tag>(c, a, jj == 0 ? xh.x : xh.z, jj == 0 ? xh.y : xh.w);
  }
}

#endif  // __CUDACC__ || PERFX_CUDA_EMULATION

}  // namespace perfx::cuda::frag
