// Int8-activation linear kernels over QMatrix (qlinear.h): repack, activation quantization, the
// plain reference and the x86 kernels (AVX2 vpmaddubsw/vpmaddwd, AVX-VNNI and AVX-512 VNNI
// vpdpbusd; compiled per function with target attributes and picked at run time). The ARM NEON
// kernels are in qlinear_neon.cpp.
#include "backend/cpu/qlinear.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "perfx/status.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace perfx::cpu {

#if defined(__aarch64__)
// qlinear_neon.cpp
void qlinear_neon(const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1, float* y,
                  int64_t ldy);
void quantize_act_neon(const float* x, int64_t ldx, int t0, int t1, QActivations& a);
#endif

// ---------------------------------------------------------------------------------------------
// QMatrix

int QMatrix::value(int64_t r, int64_t k) const {
  const uint8_t* t = tile(r / kQTileRows);
  const int i = (int)(r % kQTileRows);
  if (bits == 4) {
    const uint8_t b = t[(size_t)(k / 8) * 64 + 4 * i + (k % 4)];
    return (k % 8) < 4 ? (b & 0xF) : (b >> 4);
  }
  return t[(size_t)(k / 4) * 64 + 4 * i + (k % 4)];
}

float QMatrix::dequant(int64_t r, int64_t k) const {
  const int64_t t = r / kQTileRows, i = r % kQTileRows, g = k / group;
  const float s = fp16_to_fp32(scales(t)[g * kQTileRows + i]);
  const float q = (float)value(r, k);
  switch (offset) {
    case QOffset::Zeros:
      return (q - (float)zeros(t)[g * kQTileRows + i]) * s;
    case QOffset::Mins:
      return q * s + fp16_to_fp32(mins(t)[g * kQTileRows + i]);
    case QOffset::Const:
      break;
  }
  return (q - (float)const_zero) * s;
}

namespace {

/// Weight memory. A piece of 1 MiB or more is an anonymous mapping of its own that starts on a
/// 2 MiB boundary and is advised for transparent huge pages (MADV_HUGEPAGE): streaming gigabytes
/// of weights through 4 KiB pages costs a TLB miss per page (Llama-2-7B AWQ decode 10.5-14.7 ->
/// 15.3-16.3 tokens/s on the development VM). Its length is the piece's, rounded to 4 KiB only, so
/// the tail that does not fill a huge page stays on small pages and no piece wastes memory (a
/// 2 MiB rounding per matrix cost ~40 MB of RSS on Llama-2-7B). Smaller pieces come from
/// aligned_alloc (zeroed).
std::shared_ptr<uint8_t> map_weight(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  const size_t len = (bytes + page - 1) & ~(page - 1);
  void* p = ::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw Error("out of memory repacking a weight (" + std::to_string(bytes >> 20) + " MiB)");
  const uintptr_t a = ((uintptr_t)p + kHuge - 1) & ~uintptr_t(kHuge - 1);
  const size_t head = a - (uintptr_t)p;
  if (head) ::munmap(p, head);
  if (kHuge - head) ::munmap(reinterpret_cast<uint8_t*>(a) + len, kHuge - head);
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(a), len, MADV_HUGEPAGE);
#endif
  return std::shared_ptr<uint8_t>(reinterpret_cast<uint8_t*>(a),
                                  [len](uint8_t* q) { ::munmap(q, len); });
}

std::shared_ptr<uint8_t> alloc_aligned(size_t bytes) {
  if (bytes >= (size_t(1) << 20)) return map_weight(bytes);  // zero-filled (fresh pages)
  void* p = std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
  if (!p) throw Error("out of memory repacking a weight (" + std::to_string(bytes >> 20) + " MiB)");
  std::memset(p, 0, bytes);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

}  // namespace

std::shared_ptr<uint8_t> alloc_weight_memory(size_t bytes) {
  return alloc_aligned(bytes);
}

namespace {

void layout(QMatrix& m) {
  m.tiles = (m.out + kQTileRows - 1) / kQTileRows;
  m.data_bytes = (size_t)kQTileRows * (size_t)m.in * (size_t)m.bits / 8;
  const size_t G = (size_t)m.groups();
  size_t meta = G * kQTileRows * 2;  // scales
  if (m.offset == QOffset::Zeros) meta += G * kQTileRows;
  if (m.offset == QOffset::Mins) meta += G * kQTileRows * 2;
  m.tile_bytes = (m.data_bytes + meta + 63) & ~size_t(63);
  m.buf = alloc_aligned(m.bytes());
}

}  // namespace

bool qmatrix_supports(const Int4Matrix& m) {
  return m.group_size > 0 && m.group_size % kQBlock == 0 && m.in % m.group_size == 0 && m.in > 0;
}

QMatrix qmatrix_from_int4(const std::vector<const Int4Matrix*>& parts) {
  check(!parts.empty(), "qmatrix_from_int4: no parts");
  const Int4Matrix& p0 = *parts[0];
  QMatrix m;
  m.in = p0.in;
  m.bits = 4;
  m.group = p0.group_size;
  bool all8 = true;
  for (const Int4Matrix* p : parts) {
    check(qmatrix_supports(*p) && p->in == m.in && p->group_size == m.group &&
              p->has_mins() == p0.has_mins(),
          "qmatrix_from_int4: parts differ in width, group size or kind of zero point");
    m.out += p->out;
    for (uint8_t z : p->zeros) all8 = all8 && z == 8;
  }
  m.offset = p0.has_mins() ? QOffset::Mins : all8 ? QOffset::Const : QOffset::Zeros;
  m.const_zero = m.offset == QOffset::Const ? 8 : 0;
  layout(m);
  const int64_t G = m.groups(), W = m.in / 8;
  int64_t row = 0;
  for (const Int4Matrix* p : parts) {
    for (int64_t r = 0; r < p->out; ++r, ++row) {
      uint8_t* t = m.buf.get() + (size_t)(row / kQTileRows) * m.tile_bytes;
      const int i = (int)(row % kQTileRows);
      const uint32_t* src = p->q.data() + r * W;
      for (int64_t c = 0; c < W; ++c) {
        const uint32_t w = src[c];  // nibble j = column 8c + j
        uint8_t* dst = t + (size_t)c * 64 + 4 * i;
        for (int j = 0; j < 4; ++j)
          dst[j] = (uint8_t)(((w >> (4 * j)) & 0xF) | (((w >> (16 + 4 * j)) & 0xF) << 4));
      }
      uint16_t* sc = reinterpret_cast<uint16_t*>(t + m.data_bytes);
      for (int64_t g = 0; g < G; ++g) {
        sc[g * kQTileRows + i] = p->scales[(size_t)(r * G + g)];
        if (m.offset == QOffset::Zeros)
          reinterpret_cast<uint8_t*>(sc + G * kQTileRows)[g * kQTileRows + i] =
              p->zeros[(size_t)(r * G + g)];
        if (m.offset == QOffset::Mins)
          (sc + G * kQTileRows)[g * kQTileRows + i] = p->mins[(size_t)(r * G + g)];
      }
    }
  }
  return m;
}

QMatrix qmatrix_from_int8(const std::vector<const Int8Matrix*>& parts) {
  check(!parts.empty(), "qmatrix_from_int8: no parts");
  QMatrix m;
  m.in = parts[0]->in;
  m.bits = 8;
  m.group = parts[0]->group_size;
  m.offset = QOffset::Const;
  m.const_zero = 128;
  for (const Int8Matrix* p : parts) {
    check(
        p->in == m.in && p->group_size == m.group && m.group % kQBlock == 0 && m.in % m.group == 0,
        "qmatrix_from_int8: parts differ in width or group size, or the group is not a "
        "multiple of 32");
    m.out += p->out;
  }
  layout(m);
  const int64_t G = m.groups();
  int64_t row = 0;
  for (const Int8Matrix* p : parts) {
    for (int64_t r = 0; r < p->out; ++r, ++row) {
      uint8_t* t = m.buf.get() + (size_t)(row / kQTileRows) * m.tile_bytes;
      const int i = (int)(row % kQTileRows);
      const int8_t* src = p->q.data() + r * m.in;
      for (int64_t c = 0; c < m.in / 4; ++c)
        for (int j = 0; j < 4; ++j)
          t[(size_t)c * 64 + 4 * i + j] = (uint8_t)((int)src[4 * c + j] + 128);
      uint16_t* sc = reinterpret_cast<uint16_t*>(t + m.data_bytes);
      for (int64_t g = 0; g < G; ++g) sc[g * kQTileRows + i] = p->scales[(size_t)(r * G + g)];
    }
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Activations

void QActivations::resize(int T_, int64_t in_) {
  T = T_;
  in = in_;
  const size_t n = (size_t)T * (size_t)in, nb = (size_t)T * (size_t)(in / kQBlock);
  if (q.size() < n) q.resize(n);
  if (d.size() < nb) {
    d.resize(nb);
    qsum.resize(nb);
    xsum.resize(nb);
  }
}

void quantize_act_ref(const float* x, int64_t ldx, int t0, int t1, QActivations& a) {
  const int64_t NB = a.blocks();
  for (int t = t0; t < t1; ++t) {
    const float* xt = x + t * ldx;
    for (int64_t b = 0; b < NB; ++b) {
      const float* xb = xt + b * kQBlock;
      float amax = 0.0f, sum = 0.0f;
      for (int k = 0; k < kQBlock; ++k) {
        amax = std::max(amax, std::fabs(xb[k]));
        sum += xb[k];
      }
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      int32_t qs = 0;
      int8_t* q = a.q.data() + t * a.in + b * kQBlock;
      for (int k = 0; k < kQBlock; ++k) {
        const float v = std::nearbyint(xb[k] * id);
        q[k] = (int8_t)std::clamp((int)v, -127, 127);
        qs += q[k];
      }
      a.d[(size_t)(t * NB + b)] = amax / 127.0f;
      a.qsum[(size_t)(t * NB + b)] = qs;
      a.xsum[(size_t)(t * NB + b)] = sum;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reference

void qlinear_ref(const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1, float* y,
                 int64_t ldy) {
  const int64_t NB = a.blocks(), bpg = w.group / kQBlock, G = w.groups();
  for (int64_t r = tile0 * kQTileRows; r < std::min(w.out, tile1 * kQTileRows); ++r) {
    const int64_t tl = r / kQTileRows, i = r % kQTileRows;
    for (int t = 0; t < a.T; ++t) {
      const int8_t* xq = a.q.data() + t * a.in;
      float acc = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        float tg = 0.0f, C = 0.0f, X = 0.0f;
        for (int64_t b = g * bpg; b < (g + 1) * bpg; ++b) {
          int32_t dot = 0;
          for (int64_t k = b * kQBlock; k < (b + 1) * kQBlock; ++k) dot += w.value(r, k) * xq[k];
          const float db = a.d[(size_t)(t * NB + b)];
          const int32_t qs = a.qsum[(size_t)(t * NB + b)];
          if (w.offset == QOffset::Const) dot -= w.const_zero * qs;
          tg += db * (float)dot;
          C += db * (float)qs;
          X += a.xsum[(size_t)(t * NB + b)];
        }
        const float s = fp16_to_fp32(w.scales(tl)[g * kQTileRows + i]);
        if (w.offset == QOffset::Zeros)
          acc += s * (tg - (float)w.zeros(tl)[g * kQTileRows + i] * C);
        else if (w.offset == QOffset::Mins)
          acc += s * tg + fp16_to_fp32(w.mins(tl)[g * kQTileRows + i]) * X;
        else
          acc += s * tg;
      }
      y[t * ldy + r] = acc;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// x86 kernels

#if defined(__x86_64__)
namespace {

#define PERFX_Q_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PERFX_Q_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define PERFX_Q_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

#ifndef PERFX_QPF
#define PERFX_QPF 8192
#endif
constexpr int kPrefetch = PERFX_QPF;  // bytes ahead of the weight stream for software prefetches

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// The per-group metadata (scales, then zeros or mins) is a second stream at the end of each tile;
/// fetch it as far ahead as the values are (kPrefetch bytes of values = that many groups), so a
/// small group (Q4_0: 32 B of scales per 256 B of values) does not wait for a cache miss per line.
inline void prefetch_meta(const QMatrix& w, int64_t tl, int64_t g) {
  const int64_t ahead = g + (int64_t)kPrefetch / ((int64_t)w.group * w.bits * 2);
  const uint8_t* s = reinterpret_cast<const uint8_t*>(w.scales(tl) + ahead * kQTileRows);
  if (((uintptr_t)s & 63) < 32) _mm_prefetch(reinterpret_cast<const char*>(s), _MM_HINT_T0);
  if (w.offset == QOffset::Mins) {
    const uint8_t* m = reinterpret_cast<const uint8_t*>(w.mins(tl) + ahead * kQTileRows);
    if (((uintptr_t)m & 63) < 32) _mm_prefetch(reinterpret_cast<const char*>(m), _MM_HINT_T0);
  } else if (w.offset == QOffset::Zeros) {
    const uint8_t* z = w.zeros(tl) + ahead * kQTileRows;
    if (((uintptr_t)z & 63) < 16) _mm_prefetch(reinterpret_cast<const char*>(z), _MM_HINT_T0);
  }
}

/// Per-token scalars of one group: Σ d_b·Σq_b (zeros) or Σ x (mins).
struct GroupScalars {
  float C, X;
};

// GCC 12 warns (-Wmaybe-uninitialized) about the _mm512_undefined_ps() inside the unmasked
// conversions; the zero-masked forms with a full mask are the same instructions.
PERFX_Q_AVX512 inline __m512 cvt_i32_ps(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(0xFFFF, v);
}
PERFX_Q_AVX512 inline __m512 cvt_ph_ps(__m256i v) {
  return _mm512_maskz_cvtph_ps(0xFFFF, v);
}

// ---- AVX-512 VNNI: one tile = one zmm of 16 int32 / fp32 lanes per token.

template <int BITS, QOffset OFF, int NT>
PERFX_Q_AVX512 void tile_avx512(const QMatrix& w, int64_t tl, const QActivations& a, int t0,
                                float* y, int64_t ldy, int nrows) {
  const int64_t G = w.groups(), NB = a.blocks(), in = a.in;
  const int bpg = w.group / kQBlock;
  const uint8_t* data = w.tile(tl);
  const uint16_t* sc = w.scales(tl);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  constexpr int KA = NT == 1 ? 4 : NT == 2 ? 2 : 1;
  const int8_t* xq[NT];
  const float* dx[NT];
  const int32_t* qx[NT];
  const float* xs[NT];
  for (int t = 0; t < NT; ++t) {
    xq[t] = a.q.data() + (t0 + t) * in;
    dx[t] = a.d.data() + (t0 + t) * NB;
    qx[t] = a.qsum.data() + (t0 + t) * NB;
    xs[t] = a.xsum.data() + (t0 + t) * NB;
  }
  __m512 out[NT];
  for (int t = 0; t < NT; ++t) out[t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    prefetch_meta(w, tl, g);
    __m512 tg[NT];
    float C[NT], X[NT];
    for (int t = 0; t < NT; ++t) {
      tg[t] = _mm512_setzero_ps();
      C[t] = X[t] = 0.0f;
    }
    for (int bb = 0; bb < bpg; ++bb) {
      const int64_t b = g * bpg + bb, k0 = b * kQBlock;
      // KA independent int32 accumulators per token, so few tokens still keep several vpdpbusd
      // in flight (its latency would otherwise bound a single-token GEMV).
      __m512i acc[NT][KA];
      for (int t = 0; t < NT; ++t)
        for (int j = 0; j < KA; ++j) acc[t][j] = _mm512_setzero_si512();
      if constexpr (BITS == 4) {
        _mm_prefetch(reinterpret_cast<const char*>(data + kPrefetch), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(data + kPrefetch + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(data + kPrefetch + 128), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(data + kPrefetch + 192), _MM_HINT_T0);
        for (int c = 0; c < 4; ++c) {
          const __m512i v = _mm512_load_si512(reinterpret_cast<const void*>(data));
          data += 64;
          const __m512i lo = _mm512_and_si512(v, m4);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          for (int t = 0; t < NT; ++t) {
            const int8_t* xk = xq[t] + k0 + 8 * c;
            __m512i& a0 = acc[t][(2 * c) % KA];
            a0 = _mm512_dpbusd_epi32(a0, lo, _mm512_set1_epi32(load_i32(xk)));
            __m512i& a1 = acc[t][(2 * c + 1) % KA];
            a1 = _mm512_dpbusd_epi32(a1, hi, _mm512_set1_epi32(load_i32(xk + 4)));
          }
        }
      } else {
        for (int c = 0; c < 8; c += 2) {
          _mm_prefetch(reinterpret_cast<const char*>(data + kPrefetch), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(data + kPrefetch + 64), _MM_HINT_T0);
          const __m512i v0 = _mm512_load_si512(reinterpret_cast<const void*>(data));
          const __m512i v1 = _mm512_load_si512(reinterpret_cast<const void*>(data + 64));
          data += 128;
          for (int t = 0; t < NT; ++t) {
            const int8_t* xk = xq[t] + k0 + 4 * c;
            __m512i& a0 = acc[t][c % KA];
            a0 = _mm512_dpbusd_epi32(a0, v0, _mm512_set1_epi32(load_i32(xk)));
            __m512i& a1 = acc[t][(c + 1) % KA];
            a1 = _mm512_dpbusd_epi32(a1, v1, _mm512_set1_epi32(load_i32(xk + 4)));
          }
        }
      }
      for (int t = 0; t < NT; ++t) {
        __m512i dot = acc[t][0];
        for (int j = 1; j < KA; ++j) dot = _mm512_add_epi32(dot, acc[t][j]);
        const float db = dx[t][b];
        if constexpr (OFF == QOffset::Const)
          dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(w.const_zero * qx[t][b]));
        tg[t] = _mm512_fmadd_ps(cvt_i32_ps(dot), _mm512_set1_ps(db), tg[t]);
        if constexpr (OFF == QOffset::Zeros) C[t] += db * (float)qx[t][b];
        if constexpr (OFF == QOffset::Mins) X[t] += xs[t][b];
      }
    }
    const __m512 s =
        cvt_ph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + g * kQTileRows)));
    if constexpr (OFF == QOffset::Zeros) {
      const __m512 z = cvt_i32_ps(_mm512_maskz_cvtepu8_epi32(
          0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.zeros(tl) + g * kQTileRows))));
      for (int t = 0; t < NT; ++t)
        out[t] = _mm512_fmadd_ps(s, _mm512_fnmadd_ps(z, _mm512_set1_ps(C[t]), tg[t]), out[t]);
    } else if constexpr (OFF == QOffset::Mins) {
      const __m512 m = cvt_ph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.mins(tl) + g * kQTileRows)));
      for (int t = 0; t < NT; ++t)
        out[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(X[t]), _mm512_fmadd_ps(s, tg[t], out[t]));
    } else {
      for (int t = 0; t < NT; ++t) out[t] = _mm512_fmadd_ps(s, tg[t], out[t]);
    }
  }
  const __mmask16 mask = (__mmask16)((1u << nrows) - 1u);
  for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, out[t]);
}

// ---- AVX2 and AVX-VNNI: the same kernels compiled twice with different target attributes.
#define PERFX_Q_NS avx2k
#define PERFX_Q_ATTR PERFX_Q_AVX2
#define PERFX_Q_VNNI false
#include "backend/cpu/qlinear_x86_avx2.inc"
#undef PERFX_Q_NS
#undef PERFX_Q_ATTR
#undef PERFX_Q_VNNI
#define PERFX_Q_NS avxvnnik
#define PERFX_Q_ATTR PERFX_Q_AVXVNNI
#define PERFX_Q_VNNI true
#include "backend/cpu/qlinear_x86_avx2.inc"
#undef PERFX_Q_NS
#undef PERFX_Q_ATTR
#undef PERFX_Q_VNNI

using TileFn = void (*)(const QMatrix&, int64_t, const QActivations&, int, float*, int64_t, int);

/// Kernel table [bits 4/8][offset][NT − 1] for one ISA.
template <template <int, QOffset, int> class K, int MAXNT>
struct Table {
  TileFn fn[2][3][MAXNT];
  Table() { fill<1>(); }
  template <int NT>
  void fill() {
    fn[0][0][NT - 1] = K<4, QOffset::Zeros, NT>::run;
    fn[0][1][NT - 1] = K<4, QOffset::Mins, NT>::run;
    fn[0][2][NT - 1] = K<4, QOffset::Const, NT>::run;
    fn[1][0][NT - 1] = K<8, QOffset::Zeros, NT>::run;
    fn[1][1][NT - 1] = K<8, QOffset::Mins, NT>::run;
    fn[1][2][NT - 1] = K<8, QOffset::Const, NT>::run;
    if constexpr (NT < MAXNT) fill<NT + 1>();
  }
};

template <int B, QOffset O, int NT>
struct K512 {
  static void run(const QMatrix& w, int64_t tl, const QActivations& a, int t0, float* y,
                  int64_t ldy, int nr) {
    tile_avx512<B, O, NT>(w, tl, a, t0, y, ldy, nr);
  }
};
template <int B, QOffset O, int NT>
struct KAvx2 {
  static void run(const QMatrix& w, int64_t tl, const QActivations& a, int t0, float* y,
                  int64_t ldy, int nr) {
    avx2k::tile<B, O, NT>(w, tl, a, t0, y, ldy, nr);
  }
};
template <int B, QOffset O, int NT>
struct KVnni {
  static void run(const QMatrix& w, int64_t tl, const QActivations& a, int t0, float* y,
                  int64_t ldy, int nr) {
    avxvnnik::tile<B, O, NT>(w, tl, a, t0, y, ldy, nr);
  }
};

constexpr int kMaxNt512 = 8;   // 2 int + 1 fp32 accumulators per token fit the 32 zmm
constexpr int kMaxNtAvx2 = 2;  // 16 ymm: 6 accumulators per token

/// Tiles [tile0, tile1) × all tokens: token blocks of kTokBlock (their int8 rows stay in L2 while
/// every tile of the range streams once per block), NT-token micro-tiles per tile.
template <int MAXNT>
void drive(const TileFn (&fns)[MAXNT], const QActivations& a, const QMatrix& w, int64_t tile0,
           int64_t tile1, float* y, int64_t ldy) {
  constexpr int kTokBlock = 64;
  for (int tb = 0; tb < a.T; tb += kTokBlock) {
    const int te = std::min(a.T, tb + kTokBlock);
    for (int64_t tl = tile0; tl < tile1; ++tl) {
      const int nrows = (int)std::min<int64_t>(kQTileRows, w.out - tl * kQTileRows);
      float* yt = y + tl * kQTileRows;
      for (int t = tb; t < te;) {
        const int nt = std::min(MAXNT, te - t);
        fns[nt - 1](w, tl, a, t, yt + t * ldy, ldy, nrows);
        t += nt;
      }
    }
  }
}

/// The per-block amax / round / sum of quantize_act_ref with AVX2 (same operations, so the same
/// bits: |x|, max, x · id rounded to nearest even by vcvtps2dq, clamp, sums in k order for xsum).
PERFX_Q_AVX2 void quantize_act_avx2(const float* x, int64_t ldx, int t0, int t1, QActivations& a) {
  const int64_t NB = a.blocks();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int t = t0; t < t1; ++t) {
    const float* xt = x + t * ldx;
    for (int64_t b = 0; b < NB; ++b) {
      const float* xb = xt + b * kQBlock;
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
      __m256 m =
          _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                        _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float amax = _mm_cvtss_f32(m4);
      float sum = 0.0f;  // k order, as the reference
      for (int k = 0; k < kQBlock; ++k) sum += xb[k];
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i qi[4];
      for (int i = 0; i < 4; ++i) {
        qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
        qi[i] = _mm256_max_epi32(_mm256_min_epi32(qi[i], _mm256_set1_epi32(127)),
                                 _mm256_set1_epi32(-127));
      }
      const __m256i s01 = _mm256_add_epi32(qi[0], qi[1]), s23 = _mm256_add_epi32(qi[2], qi[3]);
      const __m256i s = _mm256_add_epi32(s01, s23);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      // Pack 32 int32 → 32 int8 in order.
      const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);  // lanes interleaved by 128-bit half
      const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
      __m256i p = _mm256_packs_epi16(p01, p23);
      p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.q.data() + t * a.in + b * kQBlock), p);
      a.d[(size_t)(t * NB + b)] = amax / 127.0f;
      a.qsum[(size_t)(t * NB + b)] = _mm_cvtsi128_si32(s4);
      a.xsum[(size_t)(t * NB + b)] = sum;
    }
  }
}

#define cpu_has(f) __builtin_cpu_supports(f)

}  // namespace
#endif  // __x86_64__

// ---------------------------------------------------------------------------------------------
// Dispatch

const char* qisa_name(QIsa isa) {
  switch (isa) {
    case QIsa::Ref:
      return "ref";
    case QIsa::Avx2:
      return "avx2";
    case QIsa::AvxVnni:
      return "avxvnni";
    case QIsa::Avx512Vnni:
      return "avx512vnni";
    case QIsa::Neon:
      return "neon";
  }
  return "?";
}

bool qisa_available(QIsa isa) {
  switch (isa) {
    case QIsa::Ref:
      return true;
#if defined(__x86_64__)
    case QIsa::Avx2:
      return cpu_has("avx2") && cpu_has("fma") && cpu_has("f16c");
    case QIsa::AvxVnni:
      return qisa_available(QIsa::Avx2) && cpu_has("avxvnni");
    case QIsa::Avx512Vnni:
      return qisa_available(QIsa::Avx2) && cpu_has("avx512f") && cpu_has("avx512bw") &&
             cpu_has("avx512vl") && cpu_has("avx512dq") && cpu_has("avx512vnni");
#endif
#if defined(__aarch64__)
    case QIsa::Neon:
      return true;
#endif
    default:
      return false;
  }
}

QIsa qisa_best() {
  static const QIsa best = [] {
    const QIsa order[] = {QIsa::Avx512Vnni, QIsa::AvxVnni, QIsa::Avx2, QIsa::Neon, QIsa::Ref};
    QIsa b = QIsa::Ref;
    for (QIsa i : order)
      if (qisa_available(i)) {
        b = i;
        break;
      }
    if (const char* e = std::getenv("PERFX_QLINEAR_ISA"); e && *e) {
      for (QIsa i : order)
        if (std::string(e) == qisa_name(i) && qisa_available(i)) b = i;
    }
    return b;
  }();
  return best;
}

void quantize_act(const float* x, int64_t ldx, int t0, int t1, QActivations& a) {
#if defined(__x86_64__)
  if (qisa_available(QIsa::Avx2)) return quantize_act_avx2(x, ldx, t0, t1, a);
#endif
#if defined(__aarch64__)
  return quantize_act_neon(x, ldx, t0, t1, a);
#endif
  quantize_act_ref(x, ldx, t0, t1, a);
}

void qlinear_isa(QIsa isa, const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1,
                 float* y, int64_t ldy) {
  if (tile0 >= tile1 || a.T <= 0) return;
  switch (isa) {
#if defined(__x86_64__)
    case QIsa::Avx512Vnni: {
      const int bi = w.bits == 4 ? 0 : 1, oi = (int)w.offset;
      static const Table<K512, kMaxNt512> t;
      return drive<kMaxNt512>(t.fn[bi][oi], a, w, tile0, tile1, y, ldy);
    }
    case QIsa::AvxVnni: {
      const int bi = w.bits == 4 ? 0 : 1, oi = (int)w.offset;
      static const Table<KVnni, kMaxNtAvx2> t;
      return drive<kMaxNtAvx2>(t.fn[bi][oi], a, w, tile0, tile1, y, ldy);
    }
    case QIsa::Avx2: {
      const int bi = w.bits == 4 ? 0 : 1, oi = (int)w.offset;
      static const Table<KAvx2, kMaxNtAvx2> t;
      return drive<kMaxNtAvx2>(t.fn[bi][oi], a, w, tile0, tile1, y, ldy);
    }
#endif
#if defined(__aarch64__)
    case QIsa::Neon:
      return qlinear_neon(a, w, tile0, tile1, y, ldy);
#endif
    default:
      return qlinear_ref(a, w, tile0, tile1, y, ldy);
  }
}

void qlinear(const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1, float* y,
             int64_t ldy) {
  qlinear_isa(qisa_best(), a, w, tile0, tile1, y, ldy);
}

bool act_quant_enabled() {
  const char* e = std::getenv("PERFX_ACT_QUANT");
  if (!e || !*e) return true;
  const std::string v(e);
  return !(v == "off" || v == "0" || v == "false" || v == "no");
}

}  // namespace perfx::cpu
