// Group quantizer and AutoAWQ GEMM/GEMV packings. Formulas: FORMATS.md §1.8 (quantizer, from
// AutoAWQ quantizer.py pseudo_quantize_tensor and gemm.py from_linear), §2.3/§2.4 (packings).
#include "quant/int4.h"

#include <algorithm>
#include <string>

#include "core/dtype.h"
#include "perfx/status.h"

namespace perfx::quant {
namespace {

void check_shape(int64_t out, int64_t in, int group_size, int bits) {
  check(out > 0 && in > 0,
        "quantize: empty matrix [" + std::to_string(out) + ", " + std::to_string(in) + "]");
  check(group_size > 0 && in % group_size == 0, "quantize: in_features " + std::to_string(in) +
                                                    " is not a multiple of the group size " +
                                                    std::to_string(group_size));
  check(bits >= 2 && bits <= 8, "quantize: unsupported bit width " + std::to_string(bits));
}

/// Rounds an fp32 value to the nearest fp16 value (ties to even) and returns it as fp32.
inline float h(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

}  // namespace

void fake_quantize_group(float* w, int n, int bits) {
  const float maxq = static_cast<float>((1 << bits) - 1);
  float mx = w[0], mn = w[0];
  for (int i = 1; i < n; ++i) {
    mx = std::max(mx, w[i]);
    mn = std::min(mn, w[i]);
  }
  const float scale = std::max(mx - mn, 1e-5f) / maxq;
  const float zero = std::clamp(-round_half_even(mn / scale), 0.0f, maxq);
  for (int i = 0; i < n; ++i) {
    const float q = std::clamp(round_half_even(w[i] / scale) + zero, 0.0f, maxq);
    w[i] = (q - zero) * scale;
  }
}

void fake_quantize(float* w, int64_t out, int64_t in, int group_size, int bits) {
  check_shape(out, in, group_size, bits);
  for (int64_t i = 0; i < out * in; i += group_size) {
    for (int j = 0; j < group_size; ++j)
      if (std::isnan(w[i + j]))
        throw Error("quantize: NaN weight at row " + std::to_string(i / in));
    fake_quantize_group(w + i, group_size, bits);
  }
}

QuantizedMatrix quantize_fp16(const float* w, int64_t out, int64_t in, int group_size, int bits,
                              int64_t* n_clamped) {
  check_shape(out, in, group_size, bits);
  QuantizedMatrix m;
  m.out = out;
  m.in = in;
  m.group_size = group_size;
  m.bits = bits;
  const int64_t G = in / group_size;
  m.q.resize(static_cast<size_t>(out * in));
  m.zeros.resize(static_cast<size_t>(out * G));
  m.scales.resize(static_cast<size_t>(out * G));
  const float maxq = static_cast<float>((1 << bits) - 1);
  const float min_range = h(1e-5f);  // torch casts the clamp bound to the tensor dtype
  int64_t clamped = 0;
  std::vector<float> g(static_cast<size_t>(group_size));
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t gi = 0; gi < G; ++gi) {
      const float* src = w + r * in + gi * group_size;
      float mx = -INFINITY, mn = INFINITY;
      for (int i = 0; i < group_size; ++i) {
        if (std::isnan(src[i])) throw Error("quantize: NaN weight at row " + std::to_string(r));
        g[i] = h(src[i]);
        if (!std::isfinite(g[i]))
          throw Error("quantize: weight " + std::to_string(src[i]) + " at row " +
                      std::to_string(r) + " overflows fp16");
        mx = std::max(mx, g[i]);
        mn = std::min(mn, g[i]);
      }
      const float scale = h(std::max(h(mx - mn), min_range) / maxq);
      const float zero = std::clamp(-round_half_even(h(mn / scale)), 0.0f, maxq);
      const float zs = h(zero * scale);
      uint8_t* qd = &m.q[static_cast<size_t>(r * in + gi * group_size)];
      for (int i = 0; i < group_size; ++i) {
        const float q = std::clamp(round_half_even(h(g[i] / scale)) + zero, 0.0f, maxq);
        const float wq = h((q - zero) * scale);  // the fake-quantized weight
        float iv = round_half_even(h(h(wq + zs) / scale));
        if (iv < 0.0f || iv > maxq || std::isnan(iv)) {
          ++clamped;
          iv = std::isnan(iv) ? q : std::clamp(iv, 0.0f, maxq);
        }
        qd[i] = static_cast<uint8_t>(iv);
      }
      m.zeros[static_cast<size_t>(r * G + gi)] = static_cast<uint8_t>(zero);
      m.scales[static_cast<size_t>(r * G + gi)] = fp32_to_fp16(scale);
    }
  }
  if (n_clamped) *n_clamped = clamped;
  return m;
}

void dequantize(const QuantizedMatrix& m, float* w) {
  const int64_t G = m.groups();
  for (int64_t r = 0; r < m.out; ++r) {
    for (int64_t k = 0; k < m.in; ++k) {
      const size_t gi = static_cast<size_t>(r * G + k / m.group_size);
      const float s = fp16_to_fp32(m.scales[gi]);
      w[r * m.in + k] =
          (static_cast<float>(m.q[static_cast<size_t>(r * m.in + k)]) - m.zeros[gi]) * s;
    }
  }
}

// ---------------------------------------------------------------------------------------------

uint32_t pack_gemm_word(const uint8_t v[8]) {
  uint32_t word = 0;
  for (int i = 0; i < 8; ++i) word |= static_cast<uint32_t>(v[kAwqOrder[i]] & 0xF) << (4 * i);
  return word;
}

namespace {
void check_pack(const QuantizedMatrix& m, const char* what) {
  check(m.bits == 4, std::string(what) + ": only 4-bit packing is supported, got " +
                         std::to_string(m.bits) + " bits");
  check(m.group_size > 0 && m.in % m.group_size == 0,
        std::string(what) + ": in_features not a multiple of the group size");
}
}  // namespace

GemmTensors pack_gemm(const QuantizedMatrix& m) {
  check_pack(m, "pack_gemm");
  check(m.out % 8 == 0,
        "pack_gemm: out_features " + std::to_string(m.out) + " is not a multiple of 8");
  const int64_t I = m.in, O = m.out, G = m.groups(), C = O / 8;
  GemmTensors t;
  t.qweight.resize(static_cast<size_t>(I * C));
  t.qzeros.resize(static_cast<size_t>(G * C));
  t.scales.resize(static_cast<size_t>(G * O));
  uint8_t v[8];
  for (int64_t k = 0; k < I; ++k) {
    for (int64_t c = 0; c < C; ++c) {
      for (int j = 0; j < 8; ++j) v[j] = m.q[static_cast<size_t>((8 * c + j) * I + k)];
      t.qweight[static_cast<size_t>(k * C + c)] = static_cast<int32_t>(pack_gemm_word(v));
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t c = 0; c < C; ++c) {
      for (int j = 0; j < 8; ++j) v[j] = m.zeros[static_cast<size_t>((8 * c + j) * G + g)];
      t.qzeros[static_cast<size_t>(g * C + c)] = static_cast<int32_t>(pack_gemm_word(v));
    }
    for (int64_t n = 0; n < O; ++n)
      t.scales[static_cast<size_t>(g * O + n)] = m.scales[static_cast<size_t>(n * G + g)];
  }
  return t;
}

GemvTensors pack_gemv(const QuantizedMatrix& m) {
  check_pack(m, "pack_gemv");
  check(m.in % 8 == 0,
        "pack_gemv: in_features " + std::to_string(m.in) + " is not a multiple of 8");
  const int64_t I = m.in, O = m.out, G = m.groups(), ZW = awq_gemv_zeros_width(I, m.group_size);
  GemvTensors t;
  t.qweight.assign(static_cast<size_t>(O * (I / 8)), 0);
  t.qzeros.assign(static_cast<size_t>(O * ZW), 0);
  t.scales.assign(static_cast<size_t>(O * ZW * 8), 0);
  for (int64_t n = 0; n < O; ++n) {
    for (int64_t c = 0; c < I / 8; ++c) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i)
        word |= static_cast<uint32_t>(m.q[static_cast<size_t>(n * I + 8 * c + i)] & 0xF) << (4 * i);
      t.qweight[static_cast<size_t>(n * (I / 8) + c)] = static_cast<int32_t>(word);
    }
    for (int64_t g = 0; g < G; ++g) {
      uint32_t& word = reinterpret_cast<uint32_t&>(t.qzeros[static_cast<size_t>(n * ZW + g / 8)]);
      word |= static_cast<uint32_t>(m.zeros[static_cast<size_t>(n * G + g)] & 0xF) << (4 * (g % 8));
      t.scales[static_cast<size_t>(n * ZW * 8 + g)] = m.scales[static_cast<size_t>(n * G + g)];
    }
  }
  return t;
}

QuantizedMatrix from_int4(const Int4Matrix& c) {
  check(!c.has_mins(), "from_int4: a matrix with mins (GGUF Q4_1) has no integer zeros");
  QuantizedMatrix m;
  m.out = c.out;
  m.in = c.in;
  m.group_size = c.group_size;
  m.bits = 4;
  m.q.resize(static_cast<size_t>(c.out * c.in));
  for (int64_t r = 0; r < c.out; ++r)
    for (int64_t k = 0; k < c.in; ++k) m.q[static_cast<size_t>(r * c.in + k)] = static_cast<uint8_t>(c.value(r, k));
  m.zeros = c.zeros;
  m.scales = c.scales;
  return m;
}

}  // namespace perfx::quant
