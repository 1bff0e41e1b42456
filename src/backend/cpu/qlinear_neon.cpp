// ARM64 NEON kernels of the int8-activation linear (qlinear.h), for the same QMatrix layout as the
// x86 kernels: a 64-byte chunk is four 16-byte registers of 4 rows × 4 columns, so every int32
// lane of an accumulator is one output row. With the dot-product extension (ARMv8.2 sdot, checked
// at run time with getauxval; PERFX_NEON_DOTPROD=0 turns it off) each register is one vdotq_s32
// against 4 broadcast activation bytes; without it, vmull_s8 + vpadalq_s16 do the same sums. 4-bit
// values (0..15) are already valid s8; 8-bit values stored as q + 128 are flipped back to s8 (q
// itself), so the 8-bit dot needs no zero correction (as the AVX2 path). Results equal qlinear_ref
// up to fp32 summation order.
#if defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/qlinear.h"
#include "core/dtype.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif

namespace perfx::cpu {
namespace {

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// acc[r] += Σ_{j<4} w[4r + j] · x[j] for the 4 rows of `w` (s8 × s8, 4 products per lane).
template <bool DOT>
inline int32x4_t dot4(int32x4_t acc, int8x16_t w, int8x16_t x);

/// sdot written as inline assembly (with an .arch directive for the assembler) so that no function
/// of this file needs the dot-product target: the compiler then cannot emit sdot into the fallback
/// path.
template <>
inline int32x4_t dot4<true>(int32x4_t acc, int8x16_t w, int8x16_t x) {
  asm(".arch armv8.2-a+dotprod\n\tsdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(w), "w"(x));
  return acc;
}

template <>
inline int32x4_t dot4<false>(int32x4_t acc, int8x16_t w, int8x16_t x) {
  const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x));
  const int16x8_t hi = vmull_high_s8(w, x);
  // Pairwise sums: lanes (0,1),(2,3) of lo are row 0, (4,5),(6,7) row 1; likewise hi rows 2, 3.
  const int32x4_t plo = vpaddlq_s16(lo), phi = vpaddlq_s16(hi);
  return vaddq_s32(acc, vpaddq_s32(plo, phi));
}

inline float16x8_t load_h8(const uint16_t* p) {
  return vreinterpretq_f16_u16(vld1q_u16(p));
}

template <bool DOT, int BITS, QOffset OFF>
void tile(const QMatrix& w, int64_t tl, const QActivations& a, int t, float* y, int nrows) {
  const int64_t G = w.groups(), NB = a.blocks();
  const int bpg = w.group / kQBlock;
  const uint8_t* data = w.tile(tl);
  const uint16_t* sc = w.scales(tl);
  const int8_t* xq = a.q.data() + (int64_t)t * a.in;
  const float* dx = a.d.data() + (int64_t)t * NB;
  const int32_t* qx = a.qsum.data() + (int64_t)t * NB;
  const float* xs = a.xsum.data() + (int64_t)t * NB;
  const int czero = BITS == 8 ? 0 : w.const_zero;  // 8-bit values are flipped back to s8 below
  const uint8x16_t m4 = vdupq_n_u8(0x0F), flip = vdupq_n_u8(0x80);
  float32x4_t out[4];
  for (int h = 0; h < 4; ++h) out[h] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < G; ++g) {
    float32x4_t tg[4];
    for (int h = 0; h < 4; ++h) tg[h] = vdupq_n_f32(0.0f);
    float C = 0.0f, X = 0.0f;
    for (int bb = 0; bb < bpg; ++bb) {
      const int64_t b = g * bpg + bb, k0 = b * kQBlock;
      int32x4_t acc[4];
      for (int h = 0; h < 4; ++h) acc[h] = vdupq_n_s32(0);
      if constexpr (BITS == 4) {
        for (int c = 0; c < 4; ++c) {
          const int8x16_t xl = vreinterpretq_s8_s32(vdupq_n_s32(load_i32(xq + k0 + 8 * c)));
          const int8x16_t xh = vreinterpretq_s8_s32(vdupq_n_s32(load_i32(xq + k0 + 8 * c + 4)));
          for (int h = 0; h < 4; ++h) {
            const uint8x16_t v = vld1q_u8(data + 16 * h);
            acc[h] = dot4<DOT>(acc[h], vreinterpretq_s8_u8(vandq_u8(v, m4)), xl);
            acc[h] = dot4<DOT>(acc[h], vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), xh);
          }
          data += 64;
        }
      } else {
        for (int c = 0; c < 8; ++c) {
          const int8x16_t xv = vreinterpretq_s8_s32(vdupq_n_s32(load_i32(xq + k0 + 4 * c)));
          for (int h = 0; h < 4; ++h)
            acc[h] =
                dot4<DOT>(acc[h], vreinterpretq_s8_u8(veorq_u8(vld1q_u8(data + 16 * h), flip)), xv);
          data += 64;
        }
      }
      const float db = dx[b];
      for (int h = 0; h < 4; ++h) {
        int32x4_t dot = acc[h];
        if constexpr (OFF == QOffset::Const) dot = vsubq_s32(dot, vdupq_n_s32(czero * qx[b]));
        tg[h] = vfmaq_n_f32(tg[h], vcvtq_f32_s32(dot), db);
      }
      if constexpr (OFF == QOffset::Zeros) C += db * (float)qx[b];
      if constexpr (OFF == QOffset::Mins) X += xs[b];
    }
    const float16x8_t s01 = load_h8(sc + g * kQTileRows), s23 = load_h8(sc + g * kQTileRows + 8);
    const float32x4_t s[4] = {vcvt_f32_f16(vget_low_f16(s01)), vcvt_high_f32_f16(s01),
                              vcvt_f32_f16(vget_low_f16(s23)), vcvt_high_f32_f16(s23)};
    if constexpr (OFF == QOffset::Zeros) {
      const uint8_t* z = w.zeros(tl) + g * kQTileRows;
      for (int h = 0; h < 4; ++h) {
        const float32x4_t zf = {(float)z[4 * h], (float)z[4 * h + 1], (float)z[4 * h + 2],
                                (float)z[4 * h + 3]};
        out[h] = vfmaq_f32(out[h], s[h], vfmsq_n_f32(tg[h], zf, C));
      }
    } else if constexpr (OFF == QOffset::Mins) {
      const float16x8_t m01 = load_h8(w.mins(tl) + g * kQTileRows),
                        m23 = load_h8(w.mins(tl) + g * kQTileRows + 8);
      const float32x4_t m[4] = {vcvt_f32_f16(vget_low_f16(m01)), vcvt_high_f32_f16(m01),
                                vcvt_f32_f16(vget_low_f16(m23)), vcvt_high_f32_f16(m23)};
      for (int h = 0; h < 4; ++h) out[h] = vfmaq_n_f32(vfmaq_f32(out[h], s[h], tg[h]), m[h], X);
    } else {
      for (int h = 0; h < 4; ++h) out[h] = vfmaq_f32(out[h], s[h], tg[h]);
    }
  }
  float tmp[16];
  for (int h = 0; h < 4; ++h) vst1q_f32(tmp + 4 * h, out[h]);
  for (int i = 0; i < nrows; ++i) y[i] = tmp[i];
}

using TileFn = void (*)(const QMatrix&, int64_t, const QActivations&, int, float*, int);

template <bool DOT>
TileFn pick(int bits, QOffset off) {
  if (bits == 4) {
    if (off == QOffset::Zeros) return tile<DOT, 4, QOffset::Zeros>;
    if (off == QOffset::Mins) return tile<DOT, 4, QOffset::Mins>;
    return tile<DOT, 4, QOffset::Const>;
  }
  if (off == QOffset::Zeros) return tile<DOT, 8, QOffset::Zeros>;
  if (off == QOffset::Mins) return tile<DOT, 8, QOffset::Mins>;
  return tile<DOT, 8, QOffset::Const>;
}

}  // namespace

bool neon_has_dotprod() {
  static const bool dp = [] {
    const char* e = std::getenv("PERFX_NEON_DOTPROD");
    if (e && std::strcmp(e, "0") == 0) return false;
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  }();
  return dp;
}

void qlinear_neon(const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1, float* y,
                  int64_t ldy) {
  const TileFn fn =
      neon_has_dotprod() ? pick<true>(w.bits, w.offset) : pick<false>(w.bits, w.offset);
  for (int64_t tl = tile0; tl < tile1; ++tl) {
    const int nrows = (int)std::min<int64_t>(kQTileRows, w.out - tl * kQTileRows);
    for (int t = 0; t < a.T; ++t) fn(w, tl, a, t, y + t * ldy + tl * kQTileRows, nrows);
  }
}

/// quantize_act_ref with NEON: same operations (|x| max, x · id rounded to nearest even, clamp),
/// so the same bits.
void quantize_act_neon(const float* x, int64_t ldx, int t0, int t1, QActivations& a) {
  const int64_t NB = a.blocks();
  for (int t = t0; t < t1; ++t) {
    const float* xt = x + t * ldx;
    for (int64_t b = 0; b < NB; ++b) {
      const float* xb = xt + b * kQBlock;
      float32x4_t v[8];
      float32x4_t m = vdupq_n_f32(0.0f);
      for (int i = 0; i < 8; ++i) {
        v[i] = vld1q_f32(xb + 4 * i);
        m = vmaxq_f32(m, vabsq_f32(v[i]));
      }
      const float amax = vmaxvq_f32(m);
      float sum = 0.0f;
      for (int k = 0; k < kQBlock; ++k) sum += xb[k];
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      int8_t* q = a.q.data() + t * a.in + b * kQBlock;
      int32x4_t s = vdupq_n_s32(0);
      for (int i = 0; i < 8; ++i) {
        int32x4_t qi = vcvtnq_s32_f32(vmulq_n_f32(v[i], id));  // round to nearest, ties even
        qi = vmaxq_s32(vminq_s32(qi, vdupq_n_s32(127)), vdupq_n_s32(-127));
        s = vaddq_s32(s, qi);
        const int16x4_t h = vmovn_s32(qi);
        const int8x8_t b8 = vmovn_s16(vcombine_s16(h, h));
        vst1_lane_s32(reinterpret_cast<int32_t*>(q + 4 * i), vreinterpret_s32_s8(b8), 0);
      }
      a.d[(size_t)(t * NB + b)] = amax / 127.0f;
      a.qsum[(size_t)(t * NB + b)] = vaddvq_s32(s);
      a.xsum[(size_t)(t * NB + b)] = sum;
    }
  }
}

}  // namespace perfx::cpu
#endif  // __aarch64__
