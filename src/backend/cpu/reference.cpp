#include "backend/cpu/reference.h"

#include <cmath>
#include <cstring>

#include "core/quantized.h"
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
    case DType::Q4_K:  // per 256: f16 d, f16 dmin, u8 scales[12], u8 qs[128]
    case DType::Q5_K:  // per 256: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
      for (int64_t b = 0; b < n / 256; ++b) {
        const bool q5 = t == DType::Q5_K;
        float sc[8], mn[8];
        kquant_scales_mins(s, sc, mn);
        const uint8_t* qh = s + 16;
        const uint8_t* q = s + (q5 ? 48 : 16);
        // Sub-blocks 2j and 2j+1 are the low and high nibbles of the same 32 bytes; Q5_K's fifth
        // bit of element l of sub-block i is bit i of qh[l].
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) {
            int lo = q[32 * j + l] & 0xF, hi = q[32 * j + l] >> 4;
            if (q5) {
              lo |= ((qh[l] >> (2 * j)) & 1) << 4;
              hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
            }
            dst[b * 256 + 64 * j + l] = sc[2 * j] * (float)lo - mn[2 * j];
            dst[b * 256 + 64 * j + 32 + l] = sc[2 * j + 1] * (float)hi - mn[2 * j + 1];
          }
        s += q5 ? 176 : 144;
      }
      return;
    case DType::Q6_K:  // per 256: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
      for (int64_t b = 0; b < n / 256; ++b, s += 210) {
        const uint8_t* ql = s;
        const uint8_t* qh = s + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(s + 192);
        const float d = fp16_to_fp32(load_u16(s + 208));
        // Two halves of 128 elements; in half h, element 32i + l (i = 0..3) has its low 4 bits in
        // ql[64h + l + 32·(i & 1)] (low nibble for i < 2, high for i >= 2) and its top 2 bits at
        // bits 2i of qh[32h + l]; value q − 32, scale sc[8h + 2i + l / 16].
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 4; ++i)
            for (int l = 0; l < 32; ++l) {
              const uint8_t lb = ql[64 * h + l + 32 * (i & 1)];
              const int low = i < 2 ? (lb & 0xF) : (lb >> 4);
              const int top = (qh[32 * h + l] >> (2 * i)) & 3;
              const int q = (low | (top << 4)) - 32;
              dst[b * 256 + 128 * h + 32 * i + l] =
                  d * (float)sc[8 * h + 2 * i + l / 16] * (float)q;
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
