// AVX2 + FMA + F16C versions of the CPU inner loops (x86-64 only; compiled per function with target
// attributes so the rest of the build stays baseline x86-64).
#include <cstring>

#include "backend/cpu/reference.h"
#include "backend/cpu/simd.h"

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
  __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
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

// Dot of fp32 x with a 16-bit-float row converted on the fly (no scratch round trip).
__attribute__((target("avx2,fma,f16c"))) static float dot_half_avx2(const float* x, const uint16_t* w,
                                                                   int64_t n, bool bf16) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
#define load8(k)                                                                                \
  (bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(                                                \
              _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (k)))), 16)) \
        : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (k)))))
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load8(i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), load8(i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load8(i), s0);
#undef load8
  __m256 s = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, w + i, 2);
    r += x[i] * (bf16 ? bf16_to_fp32(v) : fp16_to_fp32(v));
  }
  return r;
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

void axpy(float a, const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (kAvx2) return axpy_avx2(a, x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

bool dot_half(const float* x, const void* w, DType t, int64_t n, float* out) {
#if defined(__x86_64__)
  if (kAvx2 && (t == DType::F16 || t == DType::BF16)) {
    *out = dot_half_avx2(x, static_cast<const uint16_t*>(w), n, t == DType::BF16);
    return true;
  }
#endif
  (void)x, (void)w, (void)t, (void)n, (void)out;
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
