// AVX2 + FMA blocked GEMM (see gemm.h): panel transpose + 6 × 16 broadcast micro-kernel.
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/simd.h"

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

constexpr int kTok = 6;  // tokens per micro-tile

/// packed[k * 16 + i] = buf[i * kGemmKBlock + k] for i < 16, k < kn (8 × 8 register transposes).
PERFX_GEMM_AVX2 void pack_panel(const float* buf, int64_t kn, float* packed) {
  const int64_t kn8 = kn & ~int64_t{7};
  for (int i0 = 0; i0 < kGemmRows; i0 += 8) {
    for (int64_t k = 0; k < kn8; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(buf + (i0 + i) * kGemmKBlock + k);
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      // Column k + j of rows i0..i0+7.
      const __m256 c[8] = {
          _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
          _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
          _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
          _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
      for (int j = 0; j < 8; ++j) _mm256_store_ps(packed + (k + j) * kGemmRows + i0, c[j]);
    }
    for (int64_t k = kn8; k < kn; ++k)
      for (int i = 0; i < 8; ++i) packed[k * kGemmRows + i0 + i] = buf[(i0 + i) * kGemmKBlock + k];
  }
}

/// y[i] (first ? = : +=) [lo, hi][i] for i < nr.
PERFX_GEMM_AVX2 inline void store_row(float* y, __m256 lo, __m256 hi, int nr, bool first) {
  if (nr == kGemmRows) {
    if (!first) {
      lo = _mm256_add_ps(_mm256_loadu_ps(y), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(y + 8), hi);
    }
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  alignas(32) float s[kGemmRows];
  _mm256_store_ps(s, lo);
  _mm256_store_ps(s + 8, hi);
  for (int i = 0; i < nr; ++i) y[i] = first ? s[i] : y[i] + s[i];
}

/// For NT tokens (x rows ldx apart, already offset to column k0) and the panel's 16 rows:
/// y[t * ldy + i] (first ? = : +=) Σ_{k < kn} packed[k][i] · x[t][k], for i < nr.
/// The accumulators are named variables (an array of __m256 made GCC 12 store them to the stack
/// on every iteration).
template <int NT>
PERFX_GEMM_AVX2 void micro_kernel(const float* x, int64_t ldx, const float* packed, int64_t kn,
                                  int nr, float* y, int64_t ldy, bool first) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
         a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  const float* x0 = x;
  const float* x1 = x + (NT > 1 ? 1 : 0) * ldx;
  const float* x2 = x + (NT > 2 ? 2 : 0) * ldx;
  const float* x3 = x + (NT > 3 ? 3 : 0) * ldx;
  const float* x4 = x + (NT > 4 ? 4 : 0) * ldx;
  const float* x5 = x + (NT > 5 ? 5 : 0) * ldx;
  for (int64_t k = 0; k < kn; ++k) {
    const __m256 w0 = _mm256_load_ps(packed + k * kGemmRows);
    const __m256 w1 = _mm256_load_ps(packed + k * kGemmRows + 8);
    __m256 xb = _mm256_broadcast_ss(x0 + k);
    a00 = _mm256_fmadd_ps(w0, xb, a00);
    a01 = _mm256_fmadd_ps(w1, xb, a01);
    if constexpr (NT > 1) {
      xb = _mm256_broadcast_ss(x1 + k);
      a10 = _mm256_fmadd_ps(w0, xb, a10);
      a11 = _mm256_fmadd_ps(w1, xb, a11);
    }
    if constexpr (NT > 2) {
      xb = _mm256_broadcast_ss(x2 + k);
      a20 = _mm256_fmadd_ps(w0, xb, a20);
      a21 = _mm256_fmadd_ps(w1, xb, a21);
    }
    if constexpr (NT > 3) {
      xb = _mm256_broadcast_ss(x3 + k);
      a30 = _mm256_fmadd_ps(w0, xb, a30);
      a31 = _mm256_fmadd_ps(w1, xb, a31);
    }
    if constexpr (NT > 4) {
      xb = _mm256_broadcast_ss(x4 + k);
      a40 = _mm256_fmadd_ps(w0, xb, a40);
      a41 = _mm256_fmadd_ps(w1, xb, a41);
    }
    if constexpr (NT > 5) {
      xb = _mm256_broadcast_ss(x5 + k);
      a50 = _mm256_fmadd_ps(w0, xb, a50);
      a51 = _mm256_fmadd_ps(w1, xb, a51);
    }
  }
  store_row(y, a00, a01, nr, first);
  if constexpr (NT > 1) store_row(y + ldy, a10, a11, nr, first);
  if constexpr (NT > 2) store_row(y + 2 * ldy, a20, a21, nr, first);
  if constexpr (NT > 3) store_row(y + 3 * ldy, a30, a31, nr, first);
  if constexpr (NT > 4) store_row(y + 4 * ldy, a40, a41, nr, first);
  if constexpr (NT > 5) store_row(y + 5 * ldy, a50, a51, nr, first);
}

/// Loop order: token block (x columns [k0, k0 + 256) of 96 tokens stay in L2) → column block →
/// panel of 16 rows (filled, transposed into L1) → 6-token micro-tiles (x from L1/L2).
PERFX_GEMM_AVX2 void gemm_avx2(const float* x, int T, int64_t ldx, int64_t in, const PanelSource& w,
                               int64_t r0, int64_t r1, float* y, int64_t ldy) {
  alignas(32) static thread_local float buf[kGemmRows * kGemmKBlock];
  alignas(32) static thread_local float packed[kGemmKBlock * kGemmRows];
  for (int tb = 0; tb < T; tb += kGemmTBlock) {
    const int nt = std::min(kGemmTBlock, T - tb);
    for (int64_t k0 = 0; k0 < in; k0 += kGemmKBlock) {
      const int64_t kn = std::min<int64_t>(kGemmKBlock, in - k0);
      const float* xk = x + tb * ldx + k0;
      const bool first = k0 == 0;
      for (int64_t r = r0; r < r1; r += kGemmRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kGemmRows, r1 - r));
        // Rows past nr are computed and dropped; keep them finite.
        if (nr < kGemmRows)
          std::memset(buf + nr * kGemmKBlock, 0, sizeof(float) * (kGemmRows - nr) * kGemmKBlock);
        w.fill(r, nr, k0, kn, buf);
        if (r + kGemmRows < r1)
          w.prefetch(r + kGemmRows,
                     static_cast<int>(std::min<int64_t>(kGemmRows, r1 - r - kGemmRows)), k0, kn);
        pack_panel(buf, kn, packed);
        float* yr = y + tb * ldy + r;
        int t = 0;
        for (; t + kTok <= nt; t += kTok)
          micro_kernel<kTok>(xk + t * ldx, ldx, packed, kn, nr, yr + t * ldy, ldy, first);
        switch (nt - t) {
          case 5:
            micro_kernel<5>(xk + t * ldx, ldx, packed, kn, nr, yr + t * ldy, ldy, first);
            break;
          case 4:
            micro_kernel<4>(xk + t * ldx, ldx, packed, kn, nr, yr + t * ldy, ldy, first);
            break;
          case 3:
            micro_kernel<3>(xk + t * ldx, ldx, packed, kn, nr, yr + t * ldy, ldy, first);
            break;
          case 2:
            micro_kernel<2>(xk + t * ldx, ldx, packed, kn, nr, yr + t * ldy, ldy, first);
            break;
          case 1:
            micro_kernel<1>(xk + t * ldx, ldx, packed, kn, nr, yr + t * ldy, ldy, first);
            break;
          default:
            break;
        }
      }
    }
  }
}

}  // namespace

#endif

void gemm_nt(const float* x, int T, int64_t ldx, int64_t in, const PanelSource& w, int64_t r0,
             int64_t r1, float* y, int64_t ldy) {
  if (T <= 0 || r0 >= r1) return;
  if (in <= 0) {  // empty sums
    for (int t = 0; t < T; ++t) std::fill(y + t * ldy + r0, y + t * ldy + r1, 0.0f);
    return;
  }
#if defined(__x86_64__)
  if (have_avx2()) return gemm_avx2(x, T, ldx, in, w, r0, r1, y, ldy);
#endif
  gemm_scalar(x, T, ldx, in, w, r0, r1, y, ldy);
}

}  // namespace perfx::cpu
