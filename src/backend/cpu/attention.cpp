// Attention for one query row over the paged KV cache (attention.h): reference and AVX2.
#include "backend/cpu/attention.h"

#include <cstring>

#include "backend/cpu/reference.h"
#include "backend/cpu/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace perfx::cpu {

void attention_row_ref(const float* q, int hd, float scale, int n_keys, const PagedKv& kv,
                       float* scores, float* out) {
  for (int j = 0; j < n_keys; ++j) scores[j] = dot_ref(q, kv.k(j), hd) * scale;
  softmax_inplace(scores, n_keys);
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(hd));
  for (int j = 0; j < n_keys; ++j) {
    const float* v = kv.v(j);
    for (int d = 0; d < hd; ++d) out[d] += scores[j] * v[d];
  }
}

#if defined(__x86_64__)
namespace {

#define PERFX_ATTN_AVX2 __attribute__((target("avx2,fma")))

/// [Σ a0, ..., Σ a7] in one vector.
PERFX_ATTN_AVX2 inline __m256 hsum8(const __m256* a) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

PERFX_ATTN_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// NV = hd / 8 vectors per head.
template <int NV>
PERFX_ATTN_AVX2 void attention_row_avx2(const float* q, float scale, int n_keys, const PagedKv& kv,
                                        float* scores, float* out) {
  // Scores, eight keys at a time (one accumulator per key, reduced together).
  int j = 0;
  for (; j + 8 <= n_keys; j += 8) {
    const float* k[8];
    for (int u = 0; u < 8; ++u) k[u] = kv.k(j + u);
    __m256 acc[8];
    for (int u = 0; u < 8; ++u) acc[u] = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k[u]));
    for (int c = 1; c < NV; ++c) {
      const __m256 qv = _mm256_loadu_ps(q + 8 * c);
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[u] + 8 * c), acc[u]);
    }
    _mm256_storeu_ps(scores + j, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
  }
  for (; j < n_keys; ++j) {
    const float* k = kv.k(j);
    __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k));
    for (int c = 1; c < NV; ++c)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), _mm256_loadu_ps(k + 8 * c), acc);
    scores[j] = hsum(acc) * scale;
  }
  softmax_inplace(scores, n_keys);
  // Output accumulated in registers.
  __m256 o[NV];
  for (int c = 0; c < NV; ++c) o[c] = _mm256_setzero_ps();
  for (j = 0; j < n_keys; ++j) {
    const float* v = kv.v(j);
    const __m256 p = _mm256_set1_ps(scores[j]);
    for (int c = 0; c < NV; ++c) o[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * c), o[c]);
  }
  for (int c = 0; c < NV; ++c) _mm256_storeu_ps(out + 8 * c, o[c]);
}

}  // namespace
#endif

void attention_row(const float* q, int hd, float scale, int n_keys, const PagedKv& kv,
                   float* scores, float* out) {
#if defined(__x86_64__)
  if (have_avx2()) {
    switch (hd) {
      case 8: return attention_row_avx2<1>(q, scale, n_keys, kv, scores, out);
      case 16: return attention_row_avx2<2>(q, scale, n_keys, kv, scores, out);
      case 32: return attention_row_avx2<4>(q, scale, n_keys, kv, scores, out);
      case 48: return attention_row_avx2<6>(q, scale, n_keys, kv, scores, out);
      case 64: return attention_row_avx2<8>(q, scale, n_keys, kv, scores, out);
      case 80: return attention_row_avx2<10>(q, scale, n_keys, kv, scores, out);
      case 96: return attention_row_avx2<12>(q, scale, n_keys, kv, scores, out);
      case 128: return attention_row_avx2<16>(q, scale, n_keys, kv, scores, out);
      default: break;
    }
  }
#endif
  attention_row_ref(q, hd, scale, n_keys, kv, scores, out);
}

}  // namespace perfx::cpu
