// GGUF Q8_0 quantization at load (core/quantized.h): the block rule, and whole matrices decoded
// back by the independent GGUF decoder (int8_from_gguf).
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
  EXPECT_EQ(q[0], -127);                                // the largest magnitude maps to ±127
  EXPECT_EQ(q[16], 0);                                  // 0 stays 0
  EXPECT_EQ(q[17], (int8_t)std::nearbyint(0.5f / df));  // 8 (0.5 / 0.0630)
  EXPECT_EQ(q[17], 8);
  for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(q[i] * df - x[i]), df * 0.5f + 1e-6f) << i;
}

TEST(Q8_0, ZeroBlockHasZeroScale) {
  float x[32] = {};
  int8_t q[32];
  std::memset(q, 0x55, sizeof q);
  EXPECT_EQ(quantize_q8_0_block(x, q), 0u);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], 0) << i;
}

// Every float dtype, an odd row count and several blocks a row; decoded by int8_from_gguf, each
// weight is within half its block's step of the source, and each block's scale is max|w| / 127.
TEST(Q8_0, MatrixRoundTripsThroughTheGgufDecoder) {
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
  for (const Case& c : cases) {
    const TensorView src = view("lm_head.weight", c.t, {out, in}, c.p, c.n);
    const std::vector<uint8_t> blocks = q8_0_from_float(src);
    ASSERT_EQ(blocks.size(), (size_t)(out * in / 32 * 34)) << dtype_name(c.t);
    const Int8Matrix m =
        int8_from_gguf(view("q", DType::Q8_0, {out, in}, blocks.data(), blocks.size()));
    std::vector<float> row((size_t)in);
    for (int64_t r = 0; r < out; ++r) {
      float_to_f32(c.t,
                   static_cast<const uint8_t*>(c.p) + (size_t)(r * in) * dtype_block_bytes(c.t),
                   row.data(), in);
      for (int64_t g = 0; g < in / 32; ++g) {
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(row[(size_t)(32 * g + i)]));
        const uint16_t d = m.scales[(size_t)(r * (in / 32) + g)];
        EXPECT_EQ(d, fp32_to_fp16(amax / 127.0f))
            << dtype_name(c.t) << " row " << r << " block " << g;
        const float df = fp16_to_fp32(d);
        for (int i = 0; i < 32; ++i) {
          const int64_t k = 32 * g + i;
          EXPECT_LE(std::fabs(m.dequant(r, k) - row[(size_t)k]), df * 0.5f + 1e-7f)
              << dtype_name(c.t) << " [" << r << ", " << k << "]";
        }
      }
    }
  }
}

TEST(Q8_0, BadInputsAreRefusedByName) {
  std::vector<float> w(64, 1.0f);
  auto message = [](const TensorView& t) {
    try {
      q8_0_from_float(t);
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
