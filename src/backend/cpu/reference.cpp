#include "backend/cpu/reference.h"

#include <cmath>
#include <cstring>

#include "perfx/status.h"

namespace perfx::cpu {

static inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      float_to_f32(t, s, dst, n);
      return;
    case DType::Q8_0:  // f16 d; i8 qs[32]
      for (int64_t b = 0; b < n / 32; ++b, s += 34) {
        const float d = fp16_to_fp32(load_u16(s));
        const int8_t* q = reinterpret_cast<const int8_t*>(s + 2);
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = (float)q[j] * d;
      }
      return;
    case DType::Q4_0:  // f16 d; u8 qs[16]; element j low nibble of qs[j], j+16 high nibble
      for (int64_t b = 0; b < n / 32; ++b, s += 18) {
        const float d = fp16_to_fp32(load_u16(s));
        const uint8_t* q = s + 2;
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = (float)((int)(q[j] & 0xf) - 8) * d;
          dst[b * 32 + j + 16] = (float)((int)(q[j] >> 4) - 8) * d;
        }
      }
      return;
    case DType::Q4_1:  // f16 d; f16 m; u8 qs[16]
      for (int64_t b = 0; b < n / 32; ++b, s += 20) {
        const float d = fp16_to_fp32(load_u16(s));
        const float m = fp16_to_fp32(load_u16(s + 2));
        const uint8_t* q = s + 4;
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = (float)(q[j] & 0xf) * d + m;
          dst[b * 32 + j + 16] = (float)(q[j] >> 4) * d + m;
        }
      }
      return;
    default:
      throw Error(std::string("cannot use a ") + dtype_name(t) + " tensor as a weight");
  }
}

float dot_ref(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* out) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / (float)n + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

void rope_head(float* x, const float* cos, const float* sin, int rot_dim, bool interleaved) {
  const int half = rot_dim / 2;
  for (int i = 0; i < half; ++i) {
    const int a = interleaved ? 2 * i : i;
    const int b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * cos[i] - x1 * sin[i];
    x[b] = x1 * cos[i] + x0 * sin[i];
  }
}

void silu_mul_row(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void softmax_inplace(float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  float s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  const float inv = 1.0f / s;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace perfx::cpu
