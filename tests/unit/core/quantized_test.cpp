// GGUF Q8_0 / Q4_0 quantization at load (core/quantized.h): the block rules, and whole matrices
// decoded back by the independent GGUF decoders (int8_from_gguf, int4_from_gguf).
#include "core/quantized.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

using namespace perfx;

namespace {

TensorView view(const std::string& name, DType t, std::vector<int64_t> shape, const void* data,
                size_t nbytes) {
  return TensorView{name, t, std::move(shape), data, nbytes};
}

}  // namespace

TEST(Q8_0, BlockKnownValues) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.5f * (float)(i - 16);  // -8 .. 7.5
  int8_t q[32];
  const uint16_t d = quantize_q8_0_block(x, q);
  EXPECT_EQ(d, fp32_to_fp16(8.0f / 127.0f));  // max |x| / 127
  const float df = fp16_to_fp32(d);
  EXPECT_EQ(q[0], -127);  // the largest magnitude maps to ±127
  EXPECT_EQ(q[16], 0);    // 0 stays 0
  EXPECT_EQ(q[17], 8);    // 0.5 / (8 / 127) = 7.94
  for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(q[i] * df - x[i]), df * 0.5f + 1e-6f) << i;
}

// ggml's rounding: the scale in fp32 (not its fp16 rounding), halves away from zero.
TEST(Q8_0, RoundsHalvesAwayFromZeroAsGgml) {
  float x[32] = {};
  x[0] = 127.0f;  // d = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  int8_t q[32];
  EXPECT_EQ(quantize_q8_0_block(x, q), fp32_to_fp16(1.0f));
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 3);  // half to even would give 2
  EXPECT_EQ(q[2], -3);
  EXPECT_EQ(q[3], 1);
}

TEST(Q8_0, ZeroBlockHasZeroScale) {
  float x[32] = {};
  int8_t q[32];
  std::memset(q, 0x55, sizeof q);
  EXPECT_EQ(quantize_q8_0_block(x, q), 0u);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], 0) << i;
}

TEST(Q4_0, BlockKnownValues) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * (float)(i - 12);  // -3 .. 4.75: m = 4.75
  uint8_t qs[16];
  const uint16_t d = quantize_q4_0_block(x, qs);
  EXPECT_EQ(d, fp32_to_fp16(4.75f / -8.0f));  // the signed extreme over -8: d < 0 here
  auto q = [&](int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; };
  EXPECT_EQ(q(31), 0);  // m itself: 4.75 / d + 8.5 = 0.5 -> 0, decoded (0 - 8) * d = 4.75
  EXPECT_EQ(q(12), 8);  // 0 -> 8
  EXPECT_EQ(q(0), 13);  // -3 / (-0.59375) + 8.5 = 13.55 -> 13
  EXPECT_EQ(q(2), 12);  // -2.5 / (-0.59375) + 8.5 = 12.71 -> 12
  EXPECT_EQ(q(20), 5);  // 2 / (-0.59375) + 8.5 = 5.13 -> 5
}

// The far side of the extreme clamps at 15: x / d in [6.5, 8] decodes to 7 d.
TEST(Q4_0, FarSideClampsAt15) {
  float x[32] = {};
  x[0] = 1.0f;    // m: d = -0.125
  x[1] = -0.99f;  // x / d = 7.92: 7.92 + 8.5 = 16.4 -> 15
  uint8_t qs[16];
  const float d = fp16_to_fp32(quantize_q4_0_block(x, qs));
  EXPECT_EQ(d, -0.125f);
  EXPECT_EQ(qs[0] & 0xF, 0);
  EXPECT_EQ(qs[1] & 0xF, 15);
  EXPECT_FLOAT_EQ((15 - 8) * d, -0.875f);  // 0.115 from -0.99: under one step
}

// Every float dtype, an odd row count and several blocks a row, to Q8_0 and Q4_0; decoded by the
// GGUF decoders, each weight is within half its block's step of the source (a Q4_0 weight clamped
// at 15 on the far side of the extreme: within one step), and each block's scale follows the rule.
TEST(GgufBlocks, MatrixRoundTripsThroughTheGgufDecoders) {
  const int64_t out = 7, in = 96;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w((size_t)(out * in));
  for (float& v : w) v = nd(rng);
  w[5] = 0.9f;  // one outlier: its block's step is larger, the others' are not
  std::vector<uint16_t> h(w.size()), b(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    h[i] = fp32_to_fp16(w[i]);
    uint32_t u;
    std::memcpy(&u, &w[i], 4);
    b[i] = (uint16_t)(u >> 16);  // bf16 by truncation
  }
  struct Case {
    DType t;
    const void* p;
    size_t n;
  } cases[] = {{DType::F32, w.data(), w.size() * 4},
               {DType::F16, h.data(), h.size() * 2},
               {DType::BF16, b.data(), b.size() * 2}};
  for (DType to : {DType::Q8_0, DType::Q4_0})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(c.t)) + " -> " + dtype_name(to));
      const TensorView src = view("lm_head.weight", c.t, {out, in}, c.p, c.n);
      const std::vector<uint8_t> blocks = gguf_blocks_from_float(src, to);
      ASSERT_EQ(blocks.size(), (size_t)(out * in / 32) * dtype_block_bytes(to));
      const TensorView q = view("q", to, {out, in}, blocks.data(), blocks.size());
      Int8Matrix m8;
      Int4Matrix m4;
      if (to == DType::Q8_0)
        m8 = int8_from_gguf(q);
      else
        m4 = int4_from_gguf(q);
      std::vector<float> row((size_t)in);
      for (int64_t r = 0; r < out; ++r) {
        float_to_f32(c.t,
                     static_cast<const uint8_t*>(c.p) + (size_t)(r * in) * dtype_block_bytes(c.t),
                     row.data(), in);
        for (int64_t g = 0; g < in / 32; ++g) {
          float amax = 0.0f, ext = 0.0f;
          for (int i = 0; i < 32; ++i) {
            const float v = row[(size_t)(32 * g + i)];
            if (std::fabs(v) > amax) {
              amax = std::fabs(v);
              ext = v;
            }
          }
          const size_t gi = (size_t)(r * (in / 32) + g);
          const uint16_t d = to == DType::Q8_0 ? m8.scales[gi] : m4.scales[gi];
          EXPECT_EQ(d, to == DType::Q8_0 ? fp32_to_fp16(amax / 127.0f) : fp32_to_fp16(ext / -8.0f))
              << "row " << r << " block " << g;
          const float step = std::fabs(fp16_to_fp32(d));
          for (int i = 0; i < 32; ++i) {
            const int64_t k = 32 * g + i;
            const float x = row[(size_t)k],
                        got = to == DType::Q8_0 ? m8.dequant(r, k) : m4.dequant(r, k);
            // fp16(d)'s own rounding moves a decoded weight by up to 2^-11 of it.
            const float tol = step * 0.5f + std::fabs(got) * 1e-3f + 1e-7f;
            const bool clamped = to == DType::Q4_0 && m4.value(r, k) == 15;
            EXPECT_LE(std::fabs(got - x), clamped ? tol + step * 0.5f : tol)
                << "[" << r << ", " << k << "]";
          }
        }
      }
    }
}

TEST(GgufBlocks, BadInputsAreRefusedByName) {
  std::vector<float> w(64, 1.0f);
  auto message = [](const TensorView& t) {
    try {
      gguf_blocks_from_float(t, DType::Q8_0);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message(view("h", DType::F32, {2, 33}, w.data(), 66 * 4))
                .find("not a multiple of the Q8_0 block size 32"),
            std::string::npos);
  EXPECT_NE(
      message(view("h", DType::I32, {2, 32}, w.data(), 64 * 4)).find("tensor 'h' has dtype I32"),
      std::string::npos);
  EXPECT_NE(
      message(view("h", DType::F32, {2, 32}, w.data(), 63 * 4)).find("tensor 'h' is truncated"),
      std::string::npos);
  EXPECT_NE(
      message(view("h", DType::F32, {64}, w.data(), 64 * 4)).find("expected a non-empty matrix"),
      std::string::npos);
}
