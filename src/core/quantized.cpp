#include "core/quantized.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "perfx/status.h"

namespace perfx {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

/// Checks a 2-D GGUF block tensor of `dt` and returns its rows and columns.
void expect_blocks(const TensorView& t, DType dt, int64_t& out, int64_t& in) {
  check(t.dtype == dt, "tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) + ", expected " +
                           dtype_name(dt));
  check(t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0,
        "tensor '" + t.name + "' has shape " + t.shape_str() + ", expected a non-empty matrix");
  out = t.shape[0];
  in = t.shape[1];
  check(in % 32 == 0, "tensor '" + t.name + "' has " + std::to_string(in) +
                          " columns, not a multiple of the block size 32");
  check(t.data != nullptr && t.nbytes >= (size_t)out * dtype_row_bytes(dt, in),
        "tensor '" + t.name + "' is truncated");
}

}  // namespace

bool int4_gguf_dtype(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q4_K;
}

void kquant_scales_mins(const void* block, float* scales, float* mins) {
  const uint8_t* s = static_cast<const uint8_t*>(block);
  const float d = fp16_to_fp32(load_u16(s)), dmin = fp16_to_fp32(load_u16(s + 2));
  const uint8_t* q = s + 4;  // 12 bytes: 8 six-bit scales and 8 six-bit mins
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    if (j < 4) {
      sc = q[j] & 63;
      m = q[j + 4] & 63;
    } else {
      sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    scales[j] = d * (float)sc;
    mins[j] = dmin * (float)m;
  }
}

namespace {

/// Q4_K into the canonical form (see quantized.h).
Int4Matrix int4_from_q4_k(const TensorView& t) {
  Int4Matrix m;
  check(t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0,
        "tensor '" + t.name + "' has shape " + t.shape_str() + ", expected a non-empty matrix");
  m.out = t.shape[0];
  m.in = t.shape[1];
  check(m.in % 256 == 0, "tensor '" + t.name + "' has " + std::to_string(m.in) +
                             " columns, not a multiple of the block size 256");
  check(t.data != nullptr && t.nbytes >= (size_t)m.out * dtype_row_bytes(DType::Q4_K, m.in),
        "tensor '" + t.name + "' is truncated");
  m.group_size = 32;
  const int64_t G = m.in / 32, W = m.in / 8;
  m.q.assign((size_t)(m.out * W), 0);
  m.scales.assign((size_t)(m.out * G), 0);
  m.mins.assign((size_t)(m.out * G), 0);
  const size_t row_bytes = dtype_row_bytes(DType::Q4_K, m.in);
  const uint8_t* base = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < m.out; ++r)
    for (int64_t b = 0; b < m.in / 256; ++b) {
      const uint8_t* blk = base + r * row_bytes + b * 144;
      float sc[8], mn[8];
      kquant_scales_mins(blk, sc, mn);
      for (int i = 0; i < 8; ++i) {
        m.scales[(size_t)(r * G + b * 8 + i)] = fp32_to_fp16(sc[i]);
        m.mins[(size_t)(r * G + b * 8 + i)] = fp32_to_fp16(-mn[i]);
      }
      const uint8_t* q = blk + 16;
      uint32_t* words = m.q.data() + r * W + b * 32;  // 256 values = 32 words
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) {
          const int64_t e0 = 64 * j + l, e1 = e0 + 32;  // low nibble, high nibble
          words[e0 / 8] |= (uint32_t)(q[32 * j + l] & 0xF) << (4 * (e0 % 8));
          words[e1 / 8] |= (uint32_t)(q[32 * j + l] >> 4) << (4 * (e1 % 8));
        }
    }
  return m;
}

}  // namespace

Int4Matrix int4_from_gguf(const TensorView& t) {
  if (t.dtype == DType::Q4_K) return int4_from_q4_k(t);
  check(
      t.dtype == DType::Q4_0 || t.dtype == DType::Q4_1,
      "tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) + ", expected Q4_0, Q4_1 or Q4_K");
  Int4Matrix m;
  expect_blocks(t, t.dtype, m.out, m.in);
  const bool q41 = t.dtype == DType::Q4_1;
  m.group_size = 32;
  const int64_t G = m.in / 32, W = m.in / 8;
  m.q.assign((size_t)(m.out * W), 0);
  m.scales.assign((size_t)(m.out * G), 0);
  if (q41)
    m.mins.assign((size_t)(m.out * G), 0);
  else
    m.zeros.assign((size_t)(m.out * G), 8);
  const size_t bb = dtype_block_bytes(t.dtype), row_bytes = dtype_row_bytes(t.dtype, m.in);
  const uint8_t* base = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < m.out; ++r) {
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* blk = base + r * row_bytes + g * bb;
      m.scales[(size_t)(r * G + g)] = load_u16(blk);
      if (q41) m.mins[(size_t)(r * G + g)] = load_u16(blk + 2);
      const uint8_t* qs = blk + (q41 ? 4 : 2);
      uint32_t* words = m.q.data() + r * W + g * 4;  // 32 values = 4 words
      for (int j = 0; j < 16; ++j) {
        const uint32_t lo = qs[j] & 0xFu, hi = qs[j] >> 4;  // elements j and j + 16
        words[j / 8] |= lo << (4 * (j % 8));
        words[2 + j / 8] |= hi << (4 * (j % 8));
      }
    }
  }
  return m;
}

Int8Matrix int8_from_gguf(const TensorView& t) {
  Int8Matrix m;
  expect_blocks(t, DType::Q8_0, m.out, m.in);
  m.group_size = 32;
  const int64_t G = m.in / 32;
  m.q.resize((size_t)(m.out * m.in));
  m.scales.resize((size_t)(m.out * G));
  const uint8_t* base = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < m.out; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* blk = base + (r * G + g) * 34;
      m.scales[(size_t)(r * G + g)] = load_u16(blk);
      std::memcpy(m.q.data() + r * m.in + g * 32, blk + 2, 32);
    }
  return m;
}

uint16_t quantize_q8_0_block(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < 32; ++i) q[i] = (int8_t)std::clamp((int)std::round(x[i] * id), -127, 127);
  return fp32_to_fp16(d);
}

uint16_t quantize_q4_0_block(const float* x, uint8_t* qs) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < 16; ++i) {
    const int lo = std::min(15, (int)(x[i] * id + 8.5f)), hi = std::min(15, (int)(x[16 + i] * id + 8.5f));
    qs[i] = (uint8_t)(lo | hi << 4);
  }
  return fp32_to_fp16(d);
}

std::vector<uint8_t> gguf_blocks_from_float(const TensorView& t, DType to) {
  check(to == DType::Q8_0 || to == DType::Q4_0,
        std::string("cannot quantize to ") + dtype_name(to) + " (Q8_0 or Q4_0)");
  check(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
        "tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) + ", expected F32, F16 or BF16 to quantize to " +
            dtype_name(to));
  check(t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0,
        "tensor '" + t.name + "' has shape " + t.shape_str() + ", expected a non-empty matrix");
  const int64_t out = t.shape[0], in = t.shape[1];
  check(in % 32 == 0, "tensor '" + t.name + "' has " + std::to_string(in) + " columns, not a multiple of the " +
                          dtype_name(to) + " block size 32");
  const size_t src_row = dtype_row_bytes(t.dtype, in), dst_row = dtype_row_bytes(to, in),
               block = dtype_block_bytes(to);
  check(t.data != nullptr && t.nbytes >= src_row * (size_t)out, "tensor '" + t.name + "' is truncated");
  std::vector<uint8_t> blocks(dst_row * (size_t)out);
  std::vector<float> row((size_t)in);
  for (int64_t r = 0; r < out; ++r) {
    float_to_f32(t.dtype, static_cast<const uint8_t*>(t.data) + (size_t)r * src_row, row.data(), in, t.name);
    uint8_t* dst = blocks.data() + (size_t)r * dst_row;
    for (int64_t b = 0; b < in / 32; ++b, dst += block) {
      const uint16_t d = to == DType::Q8_0 ? quantize_q8_0_block(row.data() + 32 * b, (int8_t*)(dst + 2))
                                           : quantize_q4_0_block(row.data() + 32 * b, dst + 2);
      std::memcpy(dst, &d, 2);
    }
  }
  return blocks;
}

}  // namespace perfx
