// W4A16 CPU kernels: AutoAWQ repack (FORMATS.md §2.3 GEMM, §2.4 GEMV), the plain reference and
// the AVX2/FMA/F16C kernels (compiled per function with target attributes, picked at run time).
#include "backend/cpu/w4a16.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cpu/avx2_util.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"
#include "core/dtype.h"
#include "core/mmap.h"
#include "perfx/status.h"


#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define PERFX_W4A16_X86 1
#endif

namespace perfx::cpu {
namespace {

/// Default of w4a16_q8_max_tokens(): 0, fp32 activations everywhere (the reference's numbers up
/// to summation order, which the AutoAWQ fixture parity of 1e-2 needs; int8 activations move the
/// tiny random fixtures' logits by up to 0.1 and models/default's PPL by +0.013 %).
constexpr int kQ8DefaultMaxT = 0;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reference.

void w4a16_linear_ref(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                      int64_t r1, float* y, int64_t ldy) {
  const int64_t W = w.in / 8, G = w.in / w.group_size;
  for (int64_t r = r0; r < r1; ++r) {
    const uint32_t* qr = w.q.data() + r * W;
    for (int t = 0; t < T; ++t) {
      const float* xt = x + t * ldx;
      float acc = 0.0f;
      for (int64_t k = 0; k < w.in; ++k) {
        const int64_t gi = r * G + k / w.group_size;
        const float s = fp16_to_fp32(w.scales[static_cast<size_t>(gi)]);
        const float q = static_cast<float>((qr[k / 8] >> (4 * (k % 8))) & 0xFu);
        acc += xt[k] * ((q - static_cast<float>(w.zeros[static_cast<size_t>(gi)])) * s);
      }
      y[t * ldy + r] = acc;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AVX2 kernels.

#ifdef PERFX_W4A16_X86
namespace {

#define PERFX_AVX2 __attribute__((target("avx2,fma,f16c")))

/// The 8 nibbles of `word` as 8 int32 lanes (lane i = nibble i).
PERFX_AVX2 inline __m256i nibbles(const uint32_t* word, __m256i shifts, __m256i mask) {
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(*word)), shifts),
                          mask);
}

/// Small T (decode): for R rows × NT tokens at a time,
///   y[t][r] = Σ_g s_g · (Σ_{k∈g} q_k x_k − z_g · Σ_{k∈g} x_k),
/// with the nibbles widened in registers (broadcast, variable shift, mask, convert) and each
/// widened chunk used by NT FMAs. xsum[t * G + g] = Σ_{k∈g} x[t][k]. Rows [r, r + R) must exist.
template <int R, int NT>
PERFX_AVX2 void direct_tile(const float* x, int64_t ldx, const float* xsum, const W4A16Matrix& w,
                            int64_t r, float* y, int64_t ldy) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i mask = _mm256_set1_epi32(0xF);
  const int64_t W = w.in / 8, G = w.in / w.group_size, cpg = w.group_size / 8;
  const uint32_t* q = w.q.data() + r * W;
  const uint16_t* sc = w.scales.data() + r * G;
  const uint8_t* zr = w.zeros.data() + r * G;
  __m256 tot[R][NT];
  float off[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) {
      tot[i][t] = _mm256_setzero_ps();
      off[i][t] = 0.0f;
    }
  for (int64_t g = 0; g < G; ++g) {
    __m256 acc[R][NT];
    for (int i = 0; i < R; ++i) {
      // One cache line per row per 128-wide group: fetch a few groups ahead.
      _mm_prefetch(reinterpret_cast<const char*>(q + i * W + (g + 8) * cpg), _MM_HINT_T0);
      for (int t = 0; t < NT; ++t) acc[i][t] = _mm256_setzero_ps();
    }
    const float* xg = x + g * w.group_size;
    const uint32_t* qg = q + g * cpg;
    for (int64_t c = 0; c < cpg; ++c) {
      __m256 xv[NT];
      for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(xg + t * ldx + 8 * c);
      for (int i = 0; i < R; ++i) {
        const __m256 wv = _mm256_cvtepi32_ps(nibbles(qg + i * W + c, shifts, mask));
        for (int t = 0; t < NT; ++t) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
      }
    }
    for (int i = 0; i < R; ++i) {
      const float s = _cvtsh_ss(sc[i * G + g]);
      const float sz = s * static_cast<float>(zr[i * G + g]);
      const __m256 sv = _mm256_set1_ps(s);
      for (int t = 0; t < NT; ++t) {
        tot[i][t] = _mm256_fmadd_ps(acc[i][t], sv, tot[i][t]);
        off[i][t] += sz * xsum[t * G + g];
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) y[t * ldy + r + i] = hsum(tot[i][t]) - off[i][t];
}

/// Rows [r0, r1) for NT tokens: R-row tiles, then single rows.
template <int R, int NT>
PERFX_AVX2 void direct_rows(const float* x, int64_t ldx, const float* xsum, const W4A16Matrix& w,
                            int64_t r0, int64_t r1, float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) direct_tile<R, NT>(x, ldx, xsum, w, r, y, ldy);
  for (; r < r1; ++r) direct_tile<1, NT>(x, ldx, xsum, w, r, y, ldy);
}

/// T <= kDirectMaxT: token tiles of up to 4, each a pass over the weights.
PERFX_AVX2 void direct_avx2(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                            int64_t r1, float* y, int64_t ldy) {
  const int64_t G = w.in / w.group_size;
  static thread_local std::vector<float> xsum;
  xsum.resize(static_cast<size_t>(T * G));
  for (int t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g) {
      const float* xg = x + t * ldx + g * w.group_size;
      __m256 s = _mm256_setzero_ps();
      for (int k = 0; k < w.group_size; k += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(xg + k));
      xsum[static_cast<size_t>(t * G + g)] = hsum(s);
    }
  int t = 0;
  while (t < T) {
    const int nt = std::min(4, T - t);
    const float* xt = x + t * ldx;
    const float* st = xsum.data() + t * G;
    float* yt = y + t * ldy;
    switch (nt) {
      case 1:
        direct_rows<4, 1>(xt, ldx, st, w, r0, r1, yt, ldy);
        break;
      case 2:
        direct_rows<2, 2>(xt, ldx, st, w, r0, r1, yt, ldy);
        break;
      case 3:
        direct_rows<1, 3>(xt, ldx, st, w, r0, r1, yt, ldy);
        break;
      default:
        direct_rows<1, 4>(xt, ldx, st, w, r0, r1, yt, ldy);
        break;
    }
    t += nt;
  }
}

// ---- int8 activations (group_size % 64 == 0) -------------------------------------------------

/// Activations quantized per (token, weight group) to int8, symmetric: x ≈ q · d with
/// d = max|x| / 127 and q = round-half-even(x / d) (llama.cpp Q8-style, one scale per AWQ group).
/// Within every 64-element block the int8 values are stored even elements first
/// (x0, x2, …, x62, x1, x3, …, x63) to match the low / high nibbles of 32 packed weight bytes.
struct Q8Activations {
  std::vector<int8_t> q;     // [T, in]
  std::vector<float> d;      // [T, G]
  std::vector<int32_t> sum;  // [T, G] Σ q over the group
};

void quantize_activations(const float* x, int T, int64_t ldx, int64_t in, int gs,
                          Q8Activations& a) {
  const int64_t G = in / gs;
  a.q.resize(static_cast<size_t>(T * in));
  a.d.resize(static_cast<size_t>(T * G));
  a.sum.resize(static_cast<size_t>(T * G));
  for (int t = 0; t < T; ++t) {
    const float* xt = x + t * ldx;
    int8_t* qt = a.q.data() + t * in;
    for (int64_t g = 0; g < G; ++g) {
      float amax = 0.0f;
      for (int64_t k = g * gs; k < (g + 1) * gs; ++k) amax = std::max(amax, std::fabs(xt[k]));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      int32_t sum = 0;
      for (int64_t k = g * gs; k < (g + 1) * gs; ++k) {
        const int v = std::clamp(static_cast<int>(std::nearbyint(xt[k] * inv)), -127, 127);
        const int64_t blk = k & ~int64_t(63), j = k - blk;
        qt[blk + ((j & 1) ? 32 + j / 2 : j / 2)] = static_cast<int8_t>(v);
        sum += v;
      }
      a.d[static_cast<size_t>(t * G + g)] = d;
      a.sum[static_cast<size_t>(t * G + g)] = sum;
    }
  }
}

/// R rows × NT tokens (token t of the tile is token t0 + t of `a`): per group, Σ q·xq with
/// integer multiply-adds (maddubs: u8 weights × s8 activations, pairs summed into s16, then madd
/// into s32; 2·15·127 < 2^15, no saturation), then y += s · d · (Σ q·xq − z · Σ xq).
template <int R, int NT>
PERFX_AVX2 void q8_tile(const Q8Activations& a, int t0, const W4A16Matrix& w, int64_t r, float* y,
                        int64_t ldy) {
  const __m256i m0f = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t W = w.in / 8, G = w.in / w.group_size, in = w.in;
  const uint8_t* q = reinterpret_cast<const uint8_t*>(w.q.data() + r * W);
  const int64_t row_bytes = W * 4;
  const uint16_t* sc = w.scales.data() + r * G;
  const uint8_t* zr = w.zeros.data() + r * G;
  const int8_t* xq = a.q.data() + t0 * in;
  const float* dx = a.d.data() + t0 * G;
  const int32_t* sx = a.sum.data() + t0 * G;
  __m256 tot[R][NT];
  float off[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) {
      tot[i][t] = _mm256_setzero_ps();
      off[i][t] = 0.0f;
    }
  for (int64_t g = 0; g < G; ++g) {
    __m256i acc[R][NT];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < NT; ++t) acc[i][t] = _mm256_setzero_si256();
    for (int64_t k = g * w.group_size; k < (g + 1) * w.group_size; k += 64) {
      __m256i xe[NT], xo[NT];
      for (int t = 0; t < NT; ++t) {
        xe[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * in + k));
        xo[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * in + k + 32));
      }
      for (int i = 0; i < R; ++i) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i * row_bytes + k / 2));
        const __m256i lo = _mm256_and_si256(v, m0f);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
        for (int t = 0; t < NT; ++t) {
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe[t]), _mm256_maddubs_epi16(hi, xo[t]));
          acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_madd_epi16(p, ones));
        }
      }
    }
    for (int i = 0; i < R; ++i) {
      const float s = _cvtsh_ss(sc[i * G + g]);
      const float z = static_cast<float>(zr[i * G + g]);
      for (int t = 0; t < NT; ++t) {
        const float sd = s * dx[t * G + g];
        tot[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][t]), _mm256_set1_ps(sd), tot[i][t]);
        off[i][t] += sd * z * static_cast<float>(sx[t * G + g]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) y[t * ldy + r + i] = hsum(tot[i][t]) - off[i][t];
}

template <int R, int NT>
PERFX_AVX2 void q8_rows(const Q8Activations& a, int t0, const W4A16Matrix& w, int64_t r0,
                        int64_t r1, float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) q8_tile<R, NT>(a, t0, w, r, y, ldy);
  for (; r < r1; ++r) q8_tile<1, NT>(a, t0, w, r, y, ldy);
}

/// Any T: token tiles of up to 4, each a pass over the weights.
PERFX_AVX2 void q8_avx2(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                        int64_t r1, float* y, int64_t ldy) {
  static thread_local Q8Activations a;
  quantize_activations(x, T, ldx, w.in, w.group_size, a);
  for (int t = 0; t < T;) {
    const int nt = std::min(4, T - t);
    float* yt = y + t * ldy;
    switch (nt) {
      case 1:
        q8_rows<4, 1>(a, t, w, r0, r1, yt, ldy);
        break;
      case 2:
        q8_rows<2, 2>(a, t, w, r0, r1, yt, ldy);
        break;
      case 3:
        q8_rows<2, 3>(a, t, w, r0, r1, yt, ldy);
        break;
      default:
        q8_rows<2, 4>(a, t, w, r0, r1, yt, ldy);
        break;
    }
    t += nt;
  }
}

constexpr int kDirectMaxT = 8;  // up to this many tokens: direct kernel, else dequant + GEMM

/// Dequantizes rows [r, r + nr) (nr <= kGemmRows), columns [k0, k0 + kn),
/// into buf[i * kGemmKBlock + (k − k0)] = (q − z) · s, exactly as the reference computes it.
PERFX_AVX2 void dequant_block(const W4A16Matrix& w, int64_t r, int nr, int64_t k0, int64_t kn,
                              float* buf) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i mask = _mm256_set1_epi32(0xF);
  const int64_t W = w.in / 8, G = w.in / w.group_size;
  for (int i = 0; i < nr; ++i) {  // rows past nr: the GEMM driver zeroes them
    float* dst = buf + i * kGemmKBlock;
    const uint32_t* qr = w.q.data() + (r + i) * W;
    int64_t k = k0;
    while (k < k0 + kn) {
      const int64_t g = k / w.group_size;
      const int64_t kend = std::min(k0 + kn, (g + 1) * w.group_size);
      const __m256 s = _mm256_set1_ps(_cvtsh_ss(w.scales[static_cast<size_t>((r + i) * G + g)]));
      const __m256i z = _mm256_set1_epi32(w.zeros[static_cast<size_t>((r + i) * G + g)]);
      for (; k < kend; k += 8) {
        const __m256i v = _mm256_sub_epi32(nibbles(qr + k / 8, shifts, mask), z);
        _mm256_store_ps(dst + (k - k0), _mm256_mul_ps(_mm256_cvtepi32_ps(v), s));
      }
    }
  }
}

/// The int4 matrix as fp32 panels for the shared GEMM (gemm.h).
class W4Panels final : public PanelSource {
 public:
  explicit W4Panels(const W4A16Matrix& w) : w_(w) {}
  void fill(int64_t r, int nr, int64_t k0, int64_t kn, float* buf) const override {
    dequant_block(w_, r, nr, k0, kn, buf);
  }
  void prefetch(int64_t r, int nr, int64_t k0, int64_t kn) const override {
    const int64_t W = w_.in / 8;
    for (int i = 0; i < nr; ++i) {
      const uint32_t* q = w_.q.data() + (r + i) * W + k0 / 8;
      for (int64_t b = 0; b < kn / 8; b += 16) __builtin_prefetch(q + b);
    }
  }

 private:
  const W4A16Matrix& w_;
};

}  // namespace

bool w4a16_have_avx2() {
  static const bool ok = [] {
    const char* force_ref = std::getenv("PERFX_W4A16_REF");
    if (force_ref && *force_ref && std::strcmp(force_ref, "0") != 0) return false;
    return have_avx2();
  }();
  return ok;
}

void w4a16_linear_avx2_q8(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                          int64_t r1, float* y, int64_t ldy) {
  if (r0 >= r1 || T <= 0) return;
  if (w.group_size % 64 != 0) {
    w4a16_linear_avx2(x, T, ldx, w, r0, r1, y, ldy);
    return;
  }
  q8_avx2(x, T, ldx, w, r0, r1, y, ldy);
}

void w4a16_linear_avx2(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                       int64_t r1, float* y, int64_t ldy) {
  if (r0 >= r1 || T <= 0) return;
  if (T <= kDirectMaxT) {
    direct_avx2(x, T, ldx, w, r0, r1, y, ldy);
    return;
  }
  gemm_nt(x, T, ldx, w.in, W4Panels(w), r0, r1, y, ldy);
}

#else  // not x86-64

bool w4a16_have_avx2() {
  return false;
}
void w4a16_linear_avx2_q8(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                          int64_t r1, float* y, int64_t ldy) {
  w4a16_linear_ref(x, T, ldx, w, r0, r1, y, ldy);
}
void w4a16_linear_avx2(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0,
                       int64_t r1, float* y, int64_t ldy) {
  w4a16_linear_ref(x, T, ldx, w, r0, r1, y, ldy);
}

#endif

int w4a16_q8_max_tokens() {
  static const int n = [] {
    const char* e = std::getenv("PERFX_W4A16_Q8");
    if (!e || !*e) return kQ8DefaultMaxT;
    if (std::strcmp(e, "all") == 0) return std::numeric_limits<int>::max();
    return std::max(0, std::atoi(e));
  }();
  return n;
}

void w4a16_linear(const float* x, int T, int64_t ldx, const W4A16Matrix& w, int64_t r0, int64_t r1,
                  float* y, int64_t ldy) {
  if (!w4a16_have_avx2())
    w4a16_linear_ref(x, T, ldx, w, r0, r1, y, ldy);
  else if (T <= w4a16_q8_max_tokens())
    w4a16_linear_avx2_q8(x, T, ldx, w, r0, r1, y, ldy);
  else
    w4a16_linear_avx2(x, T, ldx, w, r0, r1, y, ldy);
}

}  // namespace perfx::cpu
