#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace perfx;

TEST(DType, Fp16KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7c00);          // overflow -> inf
  EXPECT_EQ(fp32_to_fp16(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_FLOAT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_FLOAT_EQ(fp16_to_fp32(0x0001), 5.9604645e-8f);
  // 1 + 2^-11 is exactly halfway between 1 and 1+2^-10: ties to even -> 1.0
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DType, Fp16RoundTripAllFinite) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf/nan
    const float f = fp16_to_fp32((uint16_t)h);
    EXPECT_EQ(fp32_to_fp16(f), (uint16_t)h) << h;
  }
}

TEST(DType, Fp16RoundingMatchesNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-70000.f, 70000.f);
  for (int i = 0; i < 20000; ++i) {
    const float x = d(rng) * (i % 2 ? 1e-4f : 1.f);
    const uint16_t h = fp32_to_fp16(x);
    if ((h & 0x7c00) == 0x7c00) continue;
    const float y = fp16_to_fp32(h);
    // neighbours must not be closer
    const float up = fp16_to_fp32(h + 1), dn = fp16_to_fp32(h - 1);
    EXPECT_LE(std::fabs(y - x), std::fabs(up - x)) << x;
    EXPECT_LE(std::fabs(y - x), std::fabs(dn - x)) << x;
  }
}

TEST(DType, Bf16) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(1.00390625f), 0x3f80);  // halfway, ties to even
  EXPECT_EQ(dtype_row_bytes(DType::Q4_0, 64), 36u);
  EXPECT_THROW(dtype_row_bytes(DType::Q8_0, 33), std::runtime_error);
}
