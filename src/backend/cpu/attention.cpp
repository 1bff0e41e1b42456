// Attention for one query row over the paged KV cache (attention.h): reference and AVX2.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/avx2_util.h"
#include "backend/cpu/reference.h"
#include "backend/cpu/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace perfx::cpu {

void attention_group_ref(const float* q, int group, int hd, float scale, int n_keys,
                         const PagedKv& kv, float* scores, float* out) {
  for (int g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* sg = scores + static_cast<int64_t>(g) * n_keys;
    float* og = out + g * hd;
    for (int j = 0; j < n_keys; ++j) sg[j] = dot_ref(qg, kv.k(j), hd) * scale;
    softmax_inplace(sg, n_keys);
    std::memset(og, 0, sizeof(float) * static_cast<size_t>(hd));
    for (int j = 0; j < n_keys; ++j) {
      const float* v = kv.v(j);
      for (int d = 0; d < hd; ++d) og[d] += sg[j] * v[d];
    }
  }
}

#if defined(__x86_64__)
namespace {

#define PERFX_ATTN_AVX2 __attribute__((target("avx2,fma")))

constexpr int kKeyBlock = 64;  // keys whose K (then V) rows stay in L1 for the whole group

/// NV = hd / 8 vectors per head.
template <int NV>
PERFX_ATTN_AVX2 void attention_group_avx2(const float* q, int group, float scale, int n_keys,
                                          const PagedKv& kv, float* scores, float* out) {
  constexpr int hd = 8 * NV;
  const __m256 vscale = _mm256_set1_ps(scale);
  // Scores: per block of keys, every head of the group; eight keys reduced together.
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = std::min(n_keys, j0 + kKeyBlock);
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * hd;
      float* sg = scores + static_cast<int64_t>(g) * n_keys;
      int j = j0;
      for (; j + 8 <= j1; j += 8) {
        const float* k[8];
        for (int u = 0; u < 8; ++u) k[u] = kv.k(j + u);
        __m256 acc[8];
        const __m256 q0 = _mm256_loadu_ps(qg);
        for (int u = 0; u < 8; ++u) acc[u] = _mm256_mul_ps(q0, _mm256_loadu_ps(k[u]));
        for (int c = 1; c < NV; ++c) {
          const __m256 qv = _mm256_loadu_ps(qg + 8 * c);
          for (int u = 0; u < 8; ++u)
            acc[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[u] + 8 * c), acc[u]);
        }
        _mm256_storeu_ps(sg + j, _mm256_mul_ps(hsum8(acc), vscale));
      }
      for (; j < j1; ++j) {
        const float* k = kv.k(j);
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(k));
        for (int c = 1; c < NV; ++c)
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), _mm256_loadu_ps(k + 8 * c), acc);
        sg[j] = hsum(acc) * scale;
      }
    }
  }
  for (int g = 0; g < group; ++g)
    softmax_inplace(scores + static_cast<int64_t>(g) * n_keys, n_keys);
  // Output: per block of keys, every head; each head's accumulator lives in registers for a block.
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = std::min(n_keys, j0 + kKeyBlock);
    for (int g = 0; g < group; ++g) {
      const float* sg = scores + static_cast<int64_t>(g) * n_keys;
      float* og = out + g * hd;
      __m256 o[NV];
      for (int c = 0; c < NV; ++c)
        o[c] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(og + 8 * c);
      for (int j = j0; j < j1; ++j) {
        const float* v = kv.v(j);
        const __m256 p = _mm256_set1_ps(sg[j]);
        for (int c = 0; c < NV; ++c) o[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * c), o[c]);
      }
      for (int c = 0; c < NV; ++c) _mm256_storeu_ps(og + 8 * c, o[c]);
    }
  }
}

}  // namespace
#endif

void attention_group(const float* q, int group, int hd, float scale, int n_keys, const PagedKv& kv,
                     float* scores, float* out) {
#if defined(__x86_64__)
  // hd = 8·NV for NV = 1..16: one instantiation per width.
  using Kernel = void (*)(const float*, int, float, int, const PagedKv&, float*, float*);
  static constexpr Kernel kKernels[16] = {
      attention_group_avx2<1>,  attention_group_avx2<2>,  attention_group_avx2<3>,
      attention_group_avx2<4>,  attention_group_avx2<5>,  attention_group_avx2<6>,
      attention_group_avx2<7>,  attention_group_avx2<8>,  attention_group_avx2<9>,
      attention_group_avx2<10>, attention_group_avx2<11>, attention_group_avx2<12>,
      attention_group_avx2<13>, attention_group_avx2<14>, attention_group_avx2<15>,
      attention_group_avx2<16>};
  if (have_avx2() && hd % 8 == 0 && hd >= 8 && hd <= 128)
    return kKernels[hd / 8 - 1](q, group, scale, n_keys, kv, scores, out);
#endif
  attention_group_ref(q, group, hd, scale, n_keys, kv, scores, out);
}

}  // namespace perfx::cpu
