// AVX2 + FMA + F16C versions of the CPU inner loops (x86-64 only; compiled per function with target
// attributes so the rest of the build stays baseline x86-64).
#include <cstring>

#include "backend/cpu/reference.h"
#include "backend/cpu/simd.h"

#include "backend/cpu/avx2_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace perfx::cpu {

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
         s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float r = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

__attribute__((target("avx2,f16c"))) static void f16_row_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = fp16_to_fp32(s[i]);
}

__attribute__((target("avx2"))) static void bf16_row_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  for (; i < n; ++i) d[i] = bf16_to_fp32(s[i]);
}

// Two 16-bit-float rows against NT fp32 token rows: each converted weight vector feeds NT FMAs,
// each token vector feeds 2. With NT <= 2 the columns alternate between two accumulator sets so
// at least 8 FMA chains are in flight (FMA latency 4 × 2 ports).
template <int NT, bool BF16>
__attribute__((target("avx2,fma,f16c"))) static void dot_16bit_2xN(const float* x, int64_t ldx,
                                                                  const uint16_t* w0,
                                                                  const uint16_t* w1, int64_t n,
                                                                  float* out, int64_t ldo) {
  constexpr int U = NT <= 2 ? 2 : 1;
  __m256 a0[U][NT], a1[U][NT];
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < NT; ++t) a0[u][t] = a1[u][t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 * U <= n; i += 8 * U) {
    for (int u = 0; u < U; ++u) {
      const __m256 v0 = half8<BF16>(w0 + i + 8 * u), v1 = half8<BF16>(w1 + i + 8 * u);
      for (int t = 0; t < NT; ++t) {
        const __m256 xv = _mm256_loadu_ps(x + t * ldx + i + 8 * u);
        a0[u][t] = _mm256_fmadd_ps(v0, xv, a0[u][t]);
        a1[u][t] = _mm256_fmadd_ps(v1, xv, a1[u][t]);
      }
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v0 = half8<BF16>(w0 + i), v1 = half8<BF16>(w1 + i);
    for (int t = 0; t < NT; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * ldx + i);
      a0[0][t] = _mm256_fmadd_ps(v0, xv, a0[0][t]);
      a1[0][t] = _mm256_fmadd_ps(v1, xv, a1[0][t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    __m256 s0v = a0[0][t], s1v = a1[0][t];
    for (int u = 1; u < U; ++u) s0v = _mm256_add_ps(s0v, a0[u][t]), s1v = _mm256_add_ps(s1v, a1[u][t]);
    // [Σ s0v lanes, Σ s1v lanes] via hadd.
    __m256 h = _mm256_hadd_ps(s0v, s1v);  // [a01 a23 b01 b23 | a45 a67 b45 b67]
    h = _mm256_hadd_ps(h, h);              // [a0-3 b0-3 a0-3 b0-3 | a4-7 b4-7 ...]
    const __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    float s0 = _mm_cvtss_f32(r), s1 = _mm_cvtss_f32(_mm_shuffle_ps(r, r, 1));
    for (int64_t k = i; k < n; ++k) {
      uint16_t u0, u1;
      std::memcpy(&u0, w0 + k, 2);
      std::memcpy(&u1, w1 + k, 2);
      s0 += x[t * ldx + k] * (BF16 ? bf16_to_fp32(u0) : fp16_to_fp32(u0));
      s1 += x[t * ldx + k] * (BF16 ? bf16_to_fp32(u1) : fp16_to_fp32(u1));
    }
    out[t * ldo] = s0;
    out[t * ldo + 1] = s1;
  }
}

// Dot of fp32 x with a 16-bit-float row converted on the fly (no scratch round trip).
template <bool BF16>
PERFX_TARGET_AVX2 static float dot_16bit_avx2(const float* x, const uint16_t* w, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), half8<BF16>(w + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), half8<BF16>(w + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), half8<BF16>(w + i), s0);
  float r = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, w + i, 2);
    r += x[i] * (BF16 ? bf16_to_fp32(v) : fp16_to_fp32(v));
  }
  return r;
}

template <bool BF16>
static void dot_16bit_rows_avx2(const float* x, int64_t ldx, int T, const uint8_t* base,
                               size_t row_bytes, int64_t n, int64_t rows, float* out, int64_t ldo) {
  if (T == 1) {  // one row at a time measured faster in the decode step (weights from L3)
    for (int64_t r = 0; r < rows; ++r)
      out[r] = dot_16bit_avx2<BF16>(x, reinterpret_cast<const uint16_t*>(base + r * row_bytes), n);
    return;
  }
  for (int64_t r = 0; r < rows; r += 2) {
    const auto* w0 = reinterpret_cast<const uint16_t*>(base + r * row_bytes);
    // An odd last row is paired with itself; its second result lands in a scratch slot.
    const bool pair = r + 1 < rows;
    const auto* w1 = pair ? reinterpret_cast<const uint16_t*>(base + (r + 1) * row_bytes) : w0;
    float tmp[8];
    float* o = pair ? out + r : tmp;
    const int64_t lo = pair ? ldo : 2;
    switch (T) {
      case 2: dot_16bit_2xN<2, BF16>(x, ldx, w0, w1, n, o, lo); break;
      case 3: dot_16bit_2xN<3, BF16>(x, ldx, w0, w1, n, o, lo); break;
      default: dot_16bit_2xN<4, BF16>(x, ldx, w0, w1, n, o, lo); break;
    }
    if (!pair)
      for (int t = 0; t < T; ++t) out[t * ldo + r] = tmp[t * 2];
  }
}

__attribute__((target("avx2,fma"))) static void silu_mul_avx2(const float* g, const float* u,
                                                             int64_t n, float* out) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    _mm256_storeu_ps(out + i,
                     _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  if (i < n) silu_mul_row(g + i, u + i, n - i, out + i);
}

static const bool kAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
#else
static const bool kAvx2 = false;
#endif

bool have_avx2() { return kAvx2; }

float dot(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
  if (kAvx2) return dot_avx2(a, b, n);
#endif
  return dot_ref(a, b, n);
}

void silu_mul_row_fast(const float* g, const float* u, int64_t n, float* out) {
#if defined(__x86_64__)
  if (kAvx2) return silu_mul_avx2(g, u, n, out);
#endif
  silu_mul_row(g, u, n, out);
}

bool dot_16bit_rows(const float* x, int64_t ldx, int T, const void* w, size_t row_bytes, DType t,
                   int64_t n, int64_t rows, float* out, int64_t ldo) {
#if defined(__x86_64__)
  if (kAvx2 && (t == DType::F16 || t == DType::BF16) && T >= 1 && T <= 4) {
    const auto* base = static_cast<const uint8_t*>(w);
    if (t == DType::BF16)
      dot_16bit_rows_avx2<true>(x, ldx, T, base, row_bytes, n, rows, out, ldo);
    else
      dot_16bit_rows_avx2<false>(x, ldx, T, base, row_bytes, n, rows, out, ldo);
    return true;
  }
#endif
  (void)x, (void)ldx, (void)T, (void)w, (void)row_bytes, (void)t, (void)n, (void)rows, (void)out,
      (void)ldo;
  return false;
}

void dequantize_row_fast(DType t, const void* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  // Rows from safetensors may be unaligned; the loads above are unaligned loads.
  if (kAvx2 && t == DType::F16) return f16_row_avx2(static_cast<const uint16_t*>(src), dst, n);
  if (kAvx2 && t == DType::BF16) return bf16_row_avx2(static_cast<const uint16_t*>(src), dst, n);
#endif
  dequantize_row(t, src, dst, n);
}

}  // namespace perfx::cpu
