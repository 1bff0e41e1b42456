// CPU fast paths against the plain reference kernels, on random odd-sized inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/reference.h"
#include "backend/cpu/simd.h"
#include "support/test_support.h"

using namespace perfx;
using namespace perfx::cpu;
using perfx::test::random_normal;


TEST(CpuKernels, DotMatchesReference) {
  for (int n : {1, 7, 31, 33, 257, 1001}) {
    auto a = random_normal(n, n), b = random_normal(n, n + 1);
    double exact = 0;
    for (int i = 0; i < n; ++i) exact += (double)a[i] * b[i];
    EXPECT_NEAR(dot(a.data(), b.data(), n), exact, 1e-4 * std::sqrt((double)n)) << n;
    EXPECT_NEAR(dot_ref(a.data(), b.data(), n), exact, 1e-4 * std::sqrt((double)n)) << n;
  }
}

TEST(CpuKernels, HalfRowsFastEqualsReference) {
  for (int n : {5, 8, 67}) {
    auto f = random_normal(n, 9);
    std::vector<uint16_t> h(n), b(n);
    for (int i = 0; i < n; ++i) {
      h[i] = fp32_to_fp16(f[i]);
      b[i] = fp32_to_bf16(f[i]);
    }
    std::vector<float> r1(n), r2(n);
    dequantize_row(DType::F16, h.data(), r1.data(), n);
    dequantize_row_fast(DType::F16, h.data(), r2.data(), n);
    EXPECT_EQ(r1, r2);
    dequantize_row(DType::BF16, b.data(), r1.data(), n);
    dequantize_row_fast(DType::BF16, b.data(), r2.data(), n);
    EXPECT_EQ(r1, r2);
  }
}

TEST(CpuKernels, BlockFormatsDequantize) {
  // Q8_0: d = 0.5 (fp16 0x3800), qs = -16..15
  std::vector<uint8_t> q8(34);
  q8[0] = 0x00;
  q8[1] = 0x38;
  for (int j = 0; j < 32; ++j) q8[2 + j] = (uint8_t)(int8_t)(j - 16);
  std::vector<float> out(32);
  dequantize_row(DType::Q8_0, q8.data(), out.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_FLOAT_EQ(out[j], 0.5f * (j - 16));
  // Q4_0: d = 2, element j low nibble of qs[j], j+16 high nibble; value (nib - 8) * d
  std::vector<uint8_t> q4(18);
  q4[0] = 0x00;
  q4[1] = 0x40;  // 2.0
  for (int j = 0; j < 16; ++j) q4[2 + j] = (uint8_t)((j & 0xf) | ((15 - j) << 4));
  dequantize_row(DType::Q4_0, q4.data(), out.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_FLOAT_EQ(out[j], 2.0f * (j - 8));
    EXPECT_FLOAT_EQ(out[j + 16], 2.0f * (15 - j - 8));
  }
  // Q4_1: d = 1, m = -3: value nib * d + m
  std::vector<uint8_t> q41(20);
  q41[1] = 0x3c;                    // d = 1.0
  q41[2] = 0x00, q41[3] = 0xc2;     // m = -3.0
  for (int j = 0; j < 16; ++j) q41[4 + j] = (uint8_t)(j | (j << 4));
  dequantize_row(DType::Q4_1, q41.data(), out.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_FLOAT_EQ(out[j], j - 3.0f);
    EXPECT_FLOAT_EQ(out[j + 16], j - 3.0f);
  }
}

TEST(CpuKernels, RmsNormAndRope) {
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 2, 0.5f}, o(4);
  rms_norm_row(x.data(), w.data(), 0.f, 4, o.data());
  const float inv = 1.0f / std::sqrt(30.0f / 4);
  EXPECT_FLOAT_EQ(o[2], 2 * 3 * inv);
  // half-split: pairs (0,2), (1,3); 90° rotation of pair 0 only
  std::vector<float> h = {1, 5, 2, 7};
  const float c[2] = {0, 1}, s[2] = {1, 0};
  rope_head(h.data(), c, s, 4, false);
  EXPECT_FLOAT_EQ(h[0], -2);
  EXPECT_FLOAT_EQ(h[2], 1);
  EXPECT_FLOAT_EQ(h[1], 5);
  std::vector<float> g = {1, 5, 2, 7};
  rope_head(g.data(), c, s, 4, true);  // pairs (0,1), (2,3)
  EXPECT_FLOAT_EQ(g[0], -5);
  EXPECT_FLOAT_EQ(g[1], 1);
  EXPECT_FLOAT_EQ(g[2], 2);
}

TEST(CpuKernels, Dot16bitRowsMatchDequantizeThenDot) {
  for (DType t : {DType::F16, DType::BF16}) {
    for (int n : {8, 13, 64, 259}) {
      for (int T : {1, 2, 3, 4}) {
        for (int rows : {1, 2, 5}) {
          const int64_t ldx = n + 1, ldo = rows + 2;
          auto x = random_normal((size_t)(T * ldx), 11), f = random_normal((size_t)(rows * n), 12);
          std::vector<uint16_t> h((size_t)(rows * n));
          for (size_t i = 0; i < h.size(); ++i)
            h[i] = t == DType::F16 ? fp32_to_fp16(f[i]) : fp32_to_bf16(f[i]);
          std::vector<float> got((size_t)(T * ldo), -7.0f);
          if (!dot_16bit_rows(x.data(), ldx, T, h.data(), 2 * (size_t)n, t, n, rows, got.data(), ldo))
            GTEST_SKIP() << "no fast path on this CPU";
          for (int tt = 0; tt < T; ++tt)
            for (int r = 0; r < ldo; ++r) {
              if (r >= rows) {
                EXPECT_EQ(got[tt * ldo + r], -7.0f) << "wrote past the last row";
                continue;
              }
              std::vector<float> w(n);
              dequantize_row(t, h.data() + r * n, w.data(), n);
              const float want = dot_ref(x.data() + tt * ldx, w.data(), n);
              EXPECT_NEAR(got[tt * ldo + r], want, 1e-4f * std::sqrt((float)n))
                  << dtype_name(t) << " n=" << n << " T=" << T << " rows=" << rows;
            }
        }
      }
      float unused = 0;
      EXPECT_FALSE(dot_16bit_rows(nullptr, 0, 5, nullptr, 0, t, n, 1, &unused, 1)) << "T > 4";
    }
  }
  EXPECT_FALSE(dot_16bit_rows(nullptr, 0, 1, nullptr, 0, DType::Q8_0, 32, 1, nullptr, 1));
}

TEST(CpuKernels, SiluMulFastMatchesReference) {
  for (int n : {1, 8, 13, 768, 1001}) {
    auto g = random_normal((size_t)n, 21), u = random_normal((size_t)n, 22);
    for (int i = 0; i < n; i += 7) g[i] *= 40.0f;  // far tails: e^-g over/underflow handling
    if (n > 3) g[0] = 95.0f, g[1] = -95.0f, g[2] = 0.0f;
    std::vector<float> want((size_t)n), got((size_t)n);
    silu_mul_row(g.data(), u.data(), n, want.data());
    silu_mul_row_fast(g.data(), u.data(), n, got.data());
    for (int i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-30f) << "n=" << n << " g=" << g[i];
  }
}

TEST(CpuKernels, SiluMulFastKeepsNaN) {
  std::vector<float> g = {NAN, 1.0f, 0.5f, NAN, 2.0f, -3.0f, 0.25f, 1.5f, NAN};
  std::vector<float> u(g.size(), 1.0f), out(g.size());
  silu_mul_row_fast(g.data(), u.data(), (int64_t)g.size(), out.data());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(std::isnan(out[i]), std::isnan(g[i])) << i;
}
