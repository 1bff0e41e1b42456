// Attention for one query row over the paged KV cache (attention.h): reference and AVX2.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

void PagedKv::load_k(int j, float* dst, int hd) const {
  if (k_raw)
    dequantize_row_fast(k_dtype, k_raw + slot(j) * k_slot_bytes, dst, hd);
  else
    std::memcpy(dst, k(j), sizeof(float) * static_cast<size_t>(hd));
}

void PagedKv::load_v(int j, float* dst, int hd) const {
  if (v_raw)
    dequantize_row_fast(v_dtype, v_raw + slot(j) * v_slot_bytes, dst, hd);
  else
    std::memcpy(dst, v(j), sizeof(float) * static_cast<size_t>(hd));
}

namespace {

constexpr int kTileKeys = 64;  // keys per block of the online-softmax tile

/// Scratch of one thread for attention_tile: the K and V block in fp32, and per query row its
/// running output, max and sum.
struct TileScratch {
  std::vector<float> kb, vb, o, m, l, s;
  void size(int hd, int rows) {
    const size_t kv = static_cast<size_t>(kTileKeys) * static_cast<size_t>(hd);
    if (kb.size() < kv) kb.resize(kv), vb.resize(kv);
    const size_t ro = static_cast<size_t>(rows) * static_cast<size_t>(hd);
    if (o.size() < ro) o.resize(ro);
    if (m.size() < static_cast<size_t>(rows)) m.resize(rows), l.resize(rows);
    if (s.size() < static_cast<size_t>(kTileKeys)) s.resize(kTileKeys);
  }
};

TileScratch& tile_scratch() {
  static thread_local TileScratch t;
  return t;
}

/// Loads keys [j0, j1) of K and V into the scratch block (fp32, rows hd apart).
void load_block(const PagedKv& kv, int j0, int j1, int hd, TileScratch& ts) {
  for (int j = j0; j < j1; ++j) {
    kv.load_k(j, ts.kb.data() + static_cast<size_t>(j - j0) * hd, hd);
    kv.load_v(j, ts.vb.data() + static_cast<size_t>(j - j0) * hd, hd);
  }
}

/// Portable attention_tile: the same blocks and online softmax in scalar fp32.
void attention_tile_scalar(const float* q, int64_t ldq, int nt, const int32_t* pos, int group,
                           int hd, float scale, const PagedKv& kv, float* out, int64_t ldo) {
  TileScratch& ts = tile_scratch();
  const int rows = nt * group;
  ts.size(hd, rows);
  std::fill(ts.o.begin(), ts.o.begin() + static_cast<long>(rows) * hd, 0.0f);
  std::fill(ts.m.begin(), ts.m.begin() + rows, -INFINITY);
  std::fill(ts.l.begin(), ts.l.begin() + rows, 0.0f);
  const int n_keys = pos[nt - 1] + 1;
  for (int j0 = 0; j0 < n_keys; j0 += kTileKeys) {
    const int j1 = std::min(n_keys, j0 + kTileKeys);
    load_block(kv, j0, j1, hd, ts);
    for (int i = 0; i < nt; ++i) {
      const int lim = std::min(j1, pos[i] + 1) - j0;
      if (lim <= 0) continue;
      for (int g = 0; g < group; ++g) {
        const int r = i * group + g;
        const float* qr = q + i * ldq + g * hd;
        float bm = -INFINITY;
        for (int j = 0; j < lim; ++j) {
          ts.s[j] = dot_ref(qr, ts.kb.data() + static_cast<size_t>(j) * hd, hd) * scale;
          bm = std::max(bm, ts.s[j]);
        }
        const float mn = std::max(ts.m[r], bm), corr = std::exp(ts.m[r] - mn);
        float* o = ts.o.data() + static_cast<size_t>(r) * hd;
        for (int d = 0; d < hd; ++d) o[d] *= corr;
        float sum = 0.0f;
        for (int j = 0; j < lim; ++j) {
          const float p = std::exp(ts.s[j] - mn);
          sum += p;
          const float* v = ts.vb.data() + static_cast<size_t>(j) * hd;
          for (int d = 0; d < hd; ++d) o[d] += p * v[d];
        }
        ts.l[r] = ts.l[r] * corr + sum;
        ts.m[r] = mn;
      }
    }
  }
  for (int i = 0; i < nt; ++i)
    for (int g = 0; g < group; ++g) {
      const int r = i * group + g;
      const float inv = 1.0f / ts.l[r];
      for (int d = 0; d < hd; ++d)
        out[i * ldo + g * hd + d] = ts.o[static_cast<size_t>(r) * hd + d] * inv;
    }
}

}  // namespace

#if defined(__x86_64__)
namespace {

#define PERFX_ATTN_AVX2 __attribute__((target("avx2,fma,f16c")))

constexpr int kKeyBlock = 64;  // keys whose K (then V) rows stay in L1 for the whole group

/// Max of the 8 lanes.
PERFX_ATTN_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

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

/// attention_tile with AVX2 + FMA: hd = 8·NV. Scores 8 keys at a time (one horizontal sum of 8),
/// e^x by exp8, the output row updated in register chunks of up to 8 vectors.
template <int NV>
PERFX_ATTN_AVX2 void attention_tile_avx2(const float* q, int64_t ldq, int nt, const int32_t* pos,
                                         int group, float scale, const PagedKv& kv, float* out,
                                         int64_t ldo) {
  constexpr int hd = 8 * NV;
  TileScratch& ts = tile_scratch();
  const int rows = nt * group;
  ts.size(hd, rows);
  std::fill(ts.o.begin(), ts.o.begin() + static_cast<long>(rows) * hd, 0.0f);
  std::fill(ts.m.begin(), ts.m.begin() + rows, -INFINITY);
  std::fill(ts.l.begin(), ts.l.begin() + rows, 0.0f);
  const __m256 vscale = _mm256_set1_ps(scale);
  const int n_keys = pos[nt - 1] + 1;
  float* sc = ts.s.data();
  for (int j0 = 0; j0 < n_keys; j0 += kTileKeys) {
    const int j1 = std::min(n_keys, j0 + kTileKeys);
    load_block(kv, j0, j1, hd, ts);  // fp32 copies (fp16 / Q8_0 rows converted once per tile)
    const float* kb = ts.kb.data();
    const float* vb = ts.vb.data();
    for (int i = 0; i < nt; ++i) {
      const int lim = std::min(j1, pos[i] + 1) - j0;
      if (lim <= 0) continue;
      for (int g = 0; g < group; ++g) {
        const int r = i * group + g;
        const float* qr = q + i * ldq + g * hd;
        // Scores of this block.
        __m256 vmax = _mm256_set1_ps(-INFINITY);
        int j = 0;
        for (; j + 8 <= lim; j += 8) {
          __m256 acc[8];
          const __m256 q0 = _mm256_loadu_ps(qr);
          for (int u = 0; u < 8; ++u)
            acc[u] = _mm256_mul_ps(q0, _mm256_loadu_ps(kb + (j + u) * hd));
          for (int c = 1; c < NV; ++c) {
            const __m256 qv = _mm256_loadu_ps(qr + 8 * c);
            for (int u = 0; u < 8; ++u)
              acc[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kb + (j + u) * hd + 8 * c), acc[u]);
          }
          const __m256 sv = _mm256_mul_ps(hsum8(acc), vscale);
          _mm256_storeu_ps(sc + j, sv);
          vmax = _mm256_max_ps(vmax, sv);
        }
        float bm = hmax(vmax);
        for (; j < lim; ++j) {
          __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qr), _mm256_loadu_ps(kb + j * hd));
          for (int c = 1; c < NV; ++c)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * c), _mm256_loadu_ps(kb + j * hd + 8 * c),
                                  acc);
          sc[j] = hsum(acc) * scale;
          bm = std::max(bm, sc[j]);
        }
        // Online softmax: rescale the running row by e^(m_old − m_new), add this block.
        const float mn = std::max(ts.m[r], bm);
        const float corr = ts.m[r] == -INFINITY ? 0.0f : std::exp(ts.m[r] - mn);
        const __m256 vmn = _mm256_set1_ps(mn);
        __m256 vsum = _mm256_setzero_ps();
        j = 0;
        for (; j + 8 <= lim; j += 8) {
          const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), vmn));
          _mm256_storeu_ps(sc + j, p);
          vsum = _mm256_add_ps(vsum, p);
        }
        float sum = hsum(vsum);
        for (; j < lim; ++j) {
          sc[j] = std::exp(sc[j] - mn);
          sum += sc[j];
        }
        ts.l[r] = ts.l[r] * corr + sum;
        ts.m[r] = mn;
        float* o = ts.o.data() + static_cast<size_t>(r) * hd;
        const __m256 vcorr = _mm256_set1_ps(corr);
        for (int c0 = 0; c0 < NV; c0 += 8) {  // chunks of up to 8 accumulators
          constexpr int CH = NV < 8 ? NV : 8;
          __m256 acc[CH];
          for (int c = 0; c < CH; ++c)
            acc[c] = c0 + c < NV ? _mm256_mul_ps(_mm256_loadu_ps(o + 8 * (c0 + c)), vcorr)
                                 : _mm256_setzero_ps();
          for (int jj = 0; jj < lim; ++jj) {
            const __m256 p = _mm256_broadcast_ss(sc + jj);
            const float* v = vb + jj * hd + 8 * c0;
            for (int c = 0; c < CH; ++c)
              if (c0 + c < NV) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * c), acc[c]);
          }
          for (int c = 0; c < CH; ++c)
            if (c0 + c < NV) _mm256_storeu_ps(o + 8 * (c0 + c), acc[c]);
        }
      }
    }
  }
  for (int i = 0; i < nt; ++i)
    for (int g = 0; g < group; ++g) {
      const int r = i * group + g;
      const __m256 inv = _mm256_set1_ps(1.0f / ts.l[r]);
      const float* o = ts.o.data() + static_cast<size_t>(r) * hd;
      float* dst = out + i * ldo + g * hd;
      for (int c = 0; c < NV; ++c)
        _mm256_storeu_ps(dst + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(o + 8 * c), inv));
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

void attention_tile(const float* q, int64_t ldq, int nt, const int32_t* pos, int group, int hd,
                    float scale, const PagedKv& kv, float* out, int64_t ldo) {
#if defined(__x86_64__)
  using Kernel = void (*)(const float*, int64_t, int, const int32_t*, int, float, const PagedKv&,
                          float*, int64_t);
  static constexpr Kernel kKernels[16] = {
      attention_tile_avx2<1>,  attention_tile_avx2<2>,  attention_tile_avx2<3>,
      attention_tile_avx2<4>,  attention_tile_avx2<5>,  attention_tile_avx2<6>,
      attention_tile_avx2<7>,  attention_tile_avx2<8>,  attention_tile_avx2<9>,
      attention_tile_avx2<10>, attention_tile_avx2<11>, attention_tile_avx2<12>,
      attention_tile_avx2<13>, attention_tile_avx2<14>, attention_tile_avx2<15>,
      attention_tile_avx2<16>};
  if (have_avx2() && hd % 8 == 0 && hd >= 8 && hd <= 128)
    return kKernels[hd / 8 - 1](q, ldq, nt, pos, group, scale, kv, out, ldo);
#endif
  attention_tile_scalar(q, ldq, nt, pos, group, hd, scale, kv, out, ldo);
}

}  // namespace perfx::cpu
