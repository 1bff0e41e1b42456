// Group quantizer and AutoAWQ GEMM/GEMV packing (FORMATS.md §1.8, §2.3, §2.4).
#include "quant/int4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "core/dtype.h"
#include "perfx/status.h"

using namespace perfx;
using namespace perfx::quant;

namespace {

QuantizedMatrix random_matrix(int64_t out, int64_t in, int g, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedMatrix m;
  m.out = out;
  m.in = in;
  m.group_size = g;
  m.q.resize(out * in);
  m.zeros.resize(out * (in / g));
  m.scales.resize(out * (in / g));
  for (auto& v : m.q) v = rng() & 0xF;
  for (auto& v : m.zeros) v = rng() & 0xF;
  for (auto& v : m.scales) v = fp32_to_fp16(0.001f + (rng() % 1000) * 1e-4f);
  return m;
}

void expect_same(const QuantizedMatrix& a, const QuantizedMatrix& b) {
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.in, b.in);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.scales, b.scales);
}

/// AutoAWQ tensors read back through the one decoder (formats/awq.h), unpacked to bytes.
QuantizedMatrix decode(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales,
                       int64_t out, int64_t in, int g, const std::string& version) {
  const int64_t G = in / g;
  AwqTensors t;
  t.version = version;
  t.group_size = g;
  t.out = out;
  t.in = in;
  if (version == "gemm") {
    t.qweight = {"qweight", DType::I32, {in, out / 8}, qweight, (size_t)(in * out / 8) * 4};
    t.qzeros = {"qzeros", DType::I32, {G, out / 8}, qzeros, (size_t)(G * out / 8) * 4};
    t.scales = {"scales", DType::F16, {G, out}, scales, (size_t)(G * out) * 2};
  } else {
    const int64_t ZW = awq_gemv_zeros_width(in, g);
    t.qweight = {"qweight", DType::I32, {out, in / 8}, qweight, (size_t)(out * in / 8) * 4};
    t.qzeros = {"qzeros", DType::I32, {out, ZW}, qzeros, (size_t)(out * ZW) * 4};
    t.scales = {"scales", DType::F16, {out, ZW * 8}, scales, (size_t)(out * ZW * 8) * 2};
  }
  return from_int4(decode_awq(t));
}

}  // namespace

TEST(Int4, RoundHalfEven) {
  EXPECT_EQ(round_half_even(0.5f), 0.0f);
  EXPECT_EQ(round_half_even(1.5f), 2.0f);
  EXPECT_EQ(round_half_even(2.5f), 2.0f);
  EXPECT_EQ(round_half_even(-0.5f), 0.0f);
  EXPECT_EQ(round_half_even(-1.5f), -2.0f);
  EXPECT_EQ(round_half_even(-2.5f), -2.0f);
  EXPECT_EQ(round_half_even(2.4999998f), 2.0f);
  EXPECT_EQ(round_half_even(3.7f), 4.0f);
  EXPECT_EQ(round_half_even(6291456.5f), 6291456.0f);  // 2^22 + 2^21 + 0.5: tie to even
  EXPECT_EQ(round_half_even(1e10f), 1e10f);
  EXPECT_TRUE(std::isinf(round_half_even(INFINITY)));
}

TEST(Int4, GemmWorkedExample) {  // FORMATS.md §2.3
  const uint8_t q[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint32_t word = pack_gemm_word(q);
  EXPECT_EQ(word, 0x86427531u);
  EXPECT_EQ(static_cast<int32_t>(word), -2042464975);
  for (int r = 0; r < 8; ++r) EXPECT_EQ((word >> (4 * kAwqReverseOrder[r])) & 0xF, q[r]) << r;

  // 8 input rows holding that word, one group of 8: qzeros 0x88888888, scales 0.01.
  int32_t qweight[8];
  for (auto& q : qweight) q = -2042464975;
  const int32_t qzeros[1] = {static_cast<int32_t>(0x88888888u)};
  uint16_t scales[8];
  for (auto& s : scales) s = fp32_to_fp16(0.01f);
  const QuantizedMatrix m = decode(qweight, qzeros, scales, 8, 8, 8, "gemm");
  std::vector<float> w(64);
  dequantize(m, w.data());
  const float s = fp16_to_fp32(fp32_to_fp16(0.01f));
  for (int r = 0; r < 8; ++r)
    for (int k = 0; k < 8; ++k) EXPECT_FLOAT_EQ(w[r * 8 + k], (r - 7) * s) << r;  // -0.07 ... 0.00
}

TEST(Int4, GemmRoundTrip) {
  const QuantizedMatrix m = random_matrix(24, 256, 128, 1);
  const GemmTensors t = pack_gemm(m);
  ASSERT_EQ(t.qweight.size(), 256u * 3);
  ASSERT_EQ(t.qzeros.size(), 2u * 3);
  ASSERT_EQ(t.scales.size(), 2u * 24);
  // Spot-check the layout directly: column n of input row k sits in word [k][n/8].
  for (int64_t n : {0, 5, 13, 23}) {
    for (int64_t k : {0, 77, 255}) {
      const uint32_t word = static_cast<uint32_t>(t.qweight[k * 3 + n / 8]);
      EXPECT_EQ((word >> (4 * kAwqReverseOrder[n % 8])) & 0xF, m.q[n * 256 + k]);
    }
    const uint32_t z = static_cast<uint32_t>(t.qzeros[1 * 3 + n / 8]);
    EXPECT_EQ((z >> (4 * kAwqReverseOrder[n % 8])) & 0xF, m.zeros[n * 2 + 1]);
    EXPECT_EQ(t.scales[1 * 24 + n], m.scales[n * 2 + 1]);
  }
  expect_same(decode(t.qweight.data(), t.qzeros.data(), t.scales.data(), 24, 256, 128, "gemm"), m);
}

TEST(Int4, GemvRoundTripAndOrder) {
  const QuantizedMatrix m = random_matrix(8, 1280, 128, 2);  // G = 10 -> ZW = 2 (padded)
  const GemvTensors t = pack_gemv(m);
  ASSERT_EQ(t.qweight.size(), 8u * 160);
  ASSERT_EQ(t.qzeros.size(), 8u * 2);
  ASSERT_EQ(t.scales.size(), 8u * 16);
  for (int64_t n : {0, 7}) {
    for (int64_t k : {0, 9, 1279}) {  // natural order: nibble k % 8 of word k / 8
      const uint32_t word = static_cast<uint32_t>(t.qweight[n * 160 + k / 8]);
      EXPECT_EQ((word >> (4 * (k % 8))) & 0xF, m.q[n * 1280 + k]);
    }
    for (int g = 0; g < 10; ++g) {
      const uint32_t z = static_cast<uint32_t>(t.qzeros[n * 2 + g / 8]);
      EXPECT_EQ((z >> (4 * (g % 8))) & 0xF, m.zeros[n * 10 + g]);
      EXPECT_EQ(t.scales[n * 16 + g], m.scales[n * 10 + g]);
    }
    EXPECT_EQ(static_cast<uint32_t>(t.qzeros[n * 2 + 1]) >> 8, 0u);  // padding nibbles are 0
    for (int g = 10; g < 16; ++g) EXPECT_EQ(t.scales[n * 16 + g], 0);
  }
  // A word with the sign bit set unpacks through unsigned shifts.
  QuantizedMatrix m2 = m;
  for (int i = 0; i < 8; ++i) m2.q[i] = 15;
  const GemvTensors t2 = pack_gemv(m2);
  EXPECT_LT(t2.qweight[0], 0);
  expect_same(decode(t2.qweight.data(), t2.qzeros.data(), t2.scales.data(), 8, 1280, 128, "gemv"), m2);
  expect_same(decode(t.qweight.data(), t.qzeros.data(), t.scales.data(), 8, 1280, 128, "gemv"), m);
}

TEST(Int4, GemvZerosWidth) {  // FORMATS.md §2.2 examples
  EXPECT_EQ(awq_gemv_zeros_width(4096, 128), 4);
  EXPECT_EQ(awq_gemv_zeros_width(11008, 128), 11);
  EXPECT_EQ(awq_gemv_zeros_width(4096, 64), 8);
  EXPECT_EQ(awq_gemv_zeros_width(4224, 64), 10);  // 66 groups -> 9 words -> multiple of 2
  EXPECT_EQ(awq_gemv_zeros_width(4096, 32), 16);
  EXPECT_EQ(awq_gemv_zeros_width(4352, 32), 20);  // 136 groups -> 17 words -> multiple of 4
  EXPECT_THROW(awq_gemv_zeros_width(4096, 16), Error);
}

TEST(Int4, PackRejectsBadShapes) {
  QuantizedMatrix m = random_matrix(12, 128, 128, 3);
  EXPECT_THROW(pack_gemm(m), Error);  // out % 8
  m.bits = 3;
  EXPECT_THROW(pack_gemv(m), Error);
}

TEST(Int4, QuantizeFp16HandExample) {
  // scale = fp16(3/15) = 0.199951171875; zero = 5; 0.5 / scale = 2.5006 rounds to fp16 2.5, and
  // torch.round(2.5) = 2 (half to even), so q = 7, not the 8 exact arithmetic would give.
  const float w[4] = {-1.0f, 0.0f, 0.5f, 2.0f};
  int64_t clamped = -1;
  const QuantizedMatrix m = quantize_fp16(w, 1, 4, 4, 4, &clamped);
  EXPECT_EQ(clamped, 0);
  EXPECT_EQ(m.scales[0], 0x3266);
  EXPECT_EQ(m.zeros[0], 5);
  EXPECT_EQ(m.q, (std::vector<uint8_t>{0, 5, 7, 15}));
}

TEST(Int4, QuantizeMatchesFakeQuantize) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const int64_t out = 16, in = 512;
  std::vector<float> w(out * in);
  for (auto& v : w) v = nd(rng);
  w[3] = 0.5f;                                                // an outlier
  for (int i = 0; i < 128; ++i) w[5 * in + 128 + i] = 0.25f;  // a constant group
  const QuantizedMatrix m = quantize_fp16(w.data(), out, in, 128, 4);
  std::vector<float> deq(out * in), fq = w;
  dequantize(m, deq.data());
  fake_quantize(fq.data(), out, in, 128, 4);
  int64_t differ = 0;
  for (int64_t i = 0; i < out * in; ++i) {
    const float s = fp16_to_fp32(m.scales[(i / in) * 4 + (i % in) / 128]);
    // fp16 vs fp32 arithmetic may move a value by one step at a rounding boundary.
    EXPECT_LE(std::fabs(deq[i] - fq[i]), 1.01f * s + 1e-6f) << i;
    const bool constant_group = i / in == 5 && (i % in) / 128 == 1;
    if (!constant_group) {
      EXPECT_LE(std::fabs(deq[i] - w[i]), 0.5f * s + 2e-3f * std::fabs(w[i]) + 1e-6f) << i;
    }
    differ += std::fabs(deq[i] - fq[i]) > 0.5f * s;  // a different integer step
  }
  EXPECT_LT(differ, out * in / 50);
  // AutoAWQ's quantizer (faithfully reproduced) collapses a constant positive group: the range is
  // clamped to 1e-5, the zero to 0, q to 15, so every value becomes 15 · 1e-5/15 ≈ 1e-5.
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(deq[5 * in + 128 + i], 1e-5f, 5e-7f);
}

TEST(Int4, QuantizeErrors) {
  std::vector<float> w(256, 0.0f);
  EXPECT_THROW(quantize_fp16(w.data(), 2, 128, 100, 4), Error);  // in % g
  EXPECT_THROW(quantize_fp16(w.data(), 2, 128, 128, 1), Error);  // bits
  w[7] = NAN;
  EXPECT_THROW(quantize_fp16(w.data(), 2, 128, 128, 4), Error);
  EXPECT_THROW(fake_quantize(w.data(), 2, 128, 128, 4), Error);
  w[7] = 1e6f;  // not representable in fp16
  EXPECT_THROW(quantize_fp16(w.data(), 2, 128, 128, 4), Error);
}
