// AVX2 + FMA blocked GEMM (see gemm.h). Micro-tile: kGemmRows (4) weight rows × 3 tokens = 12
// ymm accumulators; per 8 columns it loads 3 activation vectors and 4 panel vectors for 12 FMAs,
// so it is FMA-bound rather than load-bound (a plain dot per (row, token) does 2 loads per FMA).
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace perfx::cpu {

namespace {

/// Portable path (no AVX2): same panels, one scalar dot per (row, token).
void gemm_scalar(const float* x, int T, int64_t ldx, int64_t in, const PanelSource& w, int64_t r0,
                 int64_t r1, float* y, int64_t ldy) {
  static thread_local float buf[kGemmRows * kGemmKBlock];
  for (int64_t r = r0; r < r1; r += kGemmRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kGemmRows, r1 - r));
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < nr; ++i) y[t * ldy + r + i] = 0.0f;
    for (int64_t k0 = 0; k0 < in; k0 += kGemmKBlock) {
      const int64_t kn = std::min<int64_t>(kGemmKBlock, in - k0);
      w.fill(r, nr, k0, kn, buf);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < nr; ++i) {
          float s = 0.0f;
          for (int64_t k = 0; k < kn; ++k) s += buf[i * kGemmKBlock + k] * x[t * ldx + k0 + k];
          y[t * ldy + r + i] += s;
        }
    }
  }
}

}  // namespace

#if defined(__x86_64__)
namespace {

#define PERFX_GEMM_AVX2 __attribute__((target("avx2,fma")))

constexpr int kTok = 3;  // tokens per micro-tile

/// [Σ a0, Σ a1, ..., Σ a7]: eight horizontal sums in one vector (6 hadd + 2 permutes + 1 add
/// instead of eight separate reductions).
PERFX_GEMM_AVX2 inline __m256 hsum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4,
                                    __m256 a5, __m256 a6, __m256 a7) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  // s0123 = [lo halves of a0..a3 | hi halves of a0..a3], likewise s4567.
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/// For NT tokens (x rows ldx apart) and the panel's rows i < nr:
///   y[t * ldy + i] (first ? = : +=) Σ_{k < kn} buf[i][k] · x[t][k].
/// Columns [0, kn8) run on 8-lane FMAs (kn8 = kn rounded down to 8), the rest in scalar.
template <int NT>
PERFX_GEMM_AVX2 void micro_kernel(const float* x, int64_t ldx, const float* buf, int64_t kn,
                                  int nr, float* y, int64_t ldy, bool first) {
  const int64_t kn8 = kn & ~int64_t{7};
  __m256 a[NT][kGemmRows];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < kGemmRows; ++i) a[t][i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kn8; k += 8) {
    __m256 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + k);
    for (int i = 0; i < kGemmRows; ++i) {
      const __m256 wv = _mm256_load_ps(buf + i * kGemmKBlock + k);
      for (int t = 0; t < NT; ++t) a[t][i] = _mm256_fmadd_ps(wv, xv[t], a[t][i]);
    }
  }
  // Two tokens' four rows per reduction: sums[0..3] = token t, sums[4..7] = token t + 1.
  for (int t = 0; t < NT; t += 2) {
    const int u = t + 1 < NT ? t + 1 : t;  // odd count: the last token reduced twice, stored once
    alignas(32) float sums[8];
    _mm256_store_ps(sums, hsum8(a[t][0], a[t][1], a[t][2], a[t][3], a[u][0], a[u][1], a[u][2], a[u][3]));
    for (int j = 0; j <= u - t; ++j) {
      const float* xt = x + (t + j) * ldx;
      float* yt = y + (t + j) * ldy;
      for (int i = 0; i < nr; ++i) {
        float sum = sums[4 * j + i];
        for (int64_t k = kn8; k < kn; ++k) sum += buf[i * kGemmKBlock + k] * xt[k];
        yt[i] = first ? sum : yt[i] + sum;
      }
    }
  }
}

/// Loop order (GotoBLAS-style): token block → column block of kGemmKBlock → block of
/// kGemmPanels panels (kGemmPanels × kGemmRows rows converted into L1 once) → token triple (its
/// x columns, 3 KiB, stay in L1) → panel. Each (column block, panel, token) partial sum is
/// reduced and added into y.
PERFX_GEMM_AVX2 void gemm_avx2(const float* x, int T, int64_t ldx, int64_t in,
                               const PanelSource& w, int64_t r0, int64_t r1, float* y,
                               int64_t ldy) {
  constexpr int kBlockRows = kGemmPanels * kGemmRows;
  alignas(32) static thread_local float buf[kGemmPanels * kGemmRows * kGemmKBlock];
  for (int tb = 0; tb < T; tb += kGemmTBlock) {
    const int nt = std::min(kGemmTBlock, T - tb);
    for (int64_t k0 = 0; k0 < in; k0 += kGemmKBlock) {
      const int64_t kn = std::min<int64_t>(kGemmKBlock, in - k0);
      const float* xk = x + tb * ldx + k0;
      const bool first = k0 == 0;
      for (int64_t rb = r0; rb < r1; rb += kBlockRows) {
        const int np = static_cast<int>(
            (std::min<int64_t>(kBlockRows, r1 - rb) + kGemmRows - 1) / kGemmRows);
        int nr[kGemmPanels];
        for (int p = 0; p < np; ++p) {
          const int64_t r = rb + p * kGemmRows;
          float* pb = buf + p * kGemmRows * kGemmKBlock;
          nr[p] = static_cast<int>(std::min<int64_t>(kGemmRows, r1 - r));
          // Rows past nr are computed and dropped; keep them finite.
          if (nr[p] < kGemmRows)
            std::memset(pb + nr[p] * kGemmKBlock, 0, sizeof(float) * (kGemmRows - nr[p]) * kGemmKBlock);
          w.fill(r, nr[p], k0, kn, pb);
        }
        if (rb + kBlockRows < r1)
          for (int p = 0; p < kGemmPanels && rb + kBlockRows + p * kGemmRows < r1; ++p) {
            const int64_t r = rb + kBlockRows + p * kGemmRows;
            w.prefetch(r, static_cast<int>(std::min<int64_t>(kGemmRows, r1 - r)), k0, kn);
          }
        int t = 0;
        for (; t < nt; t += kTok) {
          const int m = std::min(kTok, nt - t);
          for (int p = 0; p < np; ++p) {
            const float* pb = buf + p * kGemmRows * kGemmKBlock;
            float* yp = y + (tb + t) * ldy + rb + p * kGemmRows;
            if (m == 3) micro_kernel<3>(xk + t * ldx, ldx, pb, kn, nr[p], yp, ldy, first);
            else if (m == 2) micro_kernel<2>(xk + t * ldx, ldx, pb, kn, nr[p], yp, ldy, first);
            else micro_kernel<1>(xk + t * ldx, ldx, pb, kn, nr[p], yp, ldy, first);
          }
        }
      }
    }
  }
}

}  // namespace

bool gemm_have_avx2() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
}

void gemm_nt(const float* x, int T, int64_t ldx, int64_t in, const PanelSource& w, int64_t r0,
             int64_t r1, float* y, int64_t ldy) {
  if (T <= 0 || r0 >= r1) return;
  if (gemm_have_avx2()) return gemm_avx2(x, T, ldx, in, w, r0, r1, y, ldy);
  gemm_scalar(x, T, ldx, in, w, r0, r1, y, ldy);
}

#else

bool gemm_have_avx2() { return false; }
void gemm_nt(const float* x, int T, int64_t ldx, int64_t in, const PanelSource& w, int64_t r0,
             int64_t r1, float* y, int64_t ldy) {
  if (T <= 0 || r0 >= r1) return;
  gemm_scalar(x, T, ldx, in, w, r0, r1, y, ldy);
}

#endif

}  // namespace perfx::cpu
