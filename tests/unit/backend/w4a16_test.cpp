// W4A16 CPU kernels, and the AutoAWQ decoder (formats/awq.h) on GEMM/GEMV tensors built in memory
// by an independent packer written here from FORMATS.md §2.3/§2.4: the reference against a dense
// double-precision matmul, and the AVX2 kernels against the reference on odd shapes.
#include "backend/cpu/w4a16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "core/dtype.h"
#include "formats/awq.h"
#include "perfx/status.h"

using namespace perfx;
using namespace perfx::cpu;

namespace {

/// A random int4 matrix in HF orientation plus its AutoAWQ tensors.
struct AwqCase {
  int64_t out = 0, in = 0;
  int g = 128;                // effective group size
  std::vector<uint8_t> q, z;  // [out, in], [out, G]
  std::vector<float> s;       // [out, G] (values exactly representable in fp16)
  std::vector<int32_t> qweight, qzeros;
  std::vector<uint16_t> scales;
  std::vector<int64_t> qw_shape, qz_shape, sc_shape;

  int64_t G() const { return in / g; }
  float w(int64_t n, int64_t k) const {
    return (static_cast<float>(q[n * in + k]) - z[n * G() + k / g]) * s[n * G() + k / g];
  }
  AwqTensors source(const std::string& version, int group_size_field) const {
    AwqTensors src;
    src.version = version;
    src.group_size = group_size_field;
    src.out = out;
    src.in = in;
    src.qweight = {"layer.qweight", DType::I32, qw_shape, qweight.data(), qweight.size() * 4};
    src.qzeros = {"layer.qzeros", DType::I32, qz_shape, qzeros.data(), qzeros.size() * 4};
    src.scales = {"layer.scales", DType::F16, sc_shape, scales.data(), scales.size() * 2};
    return src;
  }
};

AwqCase make_values(int64_t out, int64_t in, int g, uint32_t seed) {
  std::mt19937 rng(seed);
  AwqCase c;
  c.out = out;
  c.in = in;
  c.g = g;
  c.q.resize(out * in);
  c.z.resize(out * c.G());
  c.s.resize(out * c.G());
  for (auto& v : c.q) v = rng() % 16;
  for (auto& v : c.z) v = rng() % 16;
  for (auto& v : c.s) v = fp16_to_fp32(fp32_to_fp16(0.002f + (rng() % 4096) * 1e-5f));
  // Row 0 / group 0 all 15 (sets the sign bit of every packed word).
  for (int64_t k = 0; k < g; ++k) c.q[k] = 15;
  c.z[0] = 15;
  return c;
}

/// GEMM packing written from FORMATS.md §2.3: nibble i of qweight[k][c] = column 8c + ORDER[i].
void pack_gemm(AwqCase& c) {
  static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const int64_t C = c.out / 8, G = c.G();
  c.qweight.assign(c.in * C, 0);
  c.qzeros.assign(G * C, 0);
  c.scales.assign(G * c.out, 0);
  for (int64_t k = 0; k < c.in; ++k)
    for (int64_t col = 0; col < C; ++col) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t(c.q[(8 * col + order[i]) * c.in + k]) << (4 * i);
      c.qweight[k * C + col] = static_cast<int32_t>(word);
    }
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t col = 0; col < C; ++col) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t(c.z[(8 * col + order[i]) * G + g]) << (4 * i);
      c.qzeros[g * C + col] = static_cast<int32_t>(word);
    }
    for (int64_t n = 0; n < c.out; ++n) c.scales[g * c.out + n] = fp32_to_fp16(c.s[n * G + g]);
  }
  c.qw_shape = {c.in, C};
  c.qz_shape = {G, C};
  c.sc_shape = {G, c.out};
}

/// GEMV packing written from FORMATS.md §2.4 (zero-padded zeros/scales, ZW from §2.2).
void pack_gemv(AwqCase& c) {
  const int64_t G = c.G();
  const int64_t mult = c.g >= 128 ? 1 : c.g == 64 ? 2 : 4;
  const int64_t ZW = ((G + 7) / 8 + mult - 1) / mult * mult;
  c.qweight.assign(c.out * (c.in / 8), 0);
  c.qzeros.assign(c.out * ZW, 0);
  c.scales.assign(c.out * ZW * 8, 0);
  for (int64_t n = 0; n < c.out; ++n) {
    for (int64_t k = 0; k < c.in; ++k)
      c.qweight[n * (c.in / 8) + k / 8] |=
          static_cast<int32_t>(uint32_t(c.q[n * c.in + k]) << (4 * (k % 8)));
    for (int64_t g = 0; g < G; ++g) {
      c.qzeros[n * ZW + g / 8] |= static_cast<int32_t>(uint32_t(c.z[n * G + g]) << (4 * (g % 8)));
      c.scales[n * ZW * 8 + g] = fp32_to_fp16(c.s[n * G + g]);
    }
  }
  c.qw_shape = {c.out, c.in / 8};
  c.qz_shape = {c.out, ZW};
  c.sc_shape = {c.out, ZW * 8};
}

std::vector<float> random_x(int T, int64_t ldx, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  std::vector<float> x(T * ldx);
  for (auto& v : x) v = (rng() & 1 ? 1.0f : -1.0f) * u(rng);  // never zero
  return x;
}

constexpr float kSentinel = 12345.0f;

/// Checks y (ldy apart) against the dense product for rows [r0, r1); rows outside untouched.
void expect_matches_dense(const AwqCase& c, const std::vector<float>& x, int T, int64_t ldx,
                          const std::vector<float>& y, int64_t ldy, int64_t r0, int64_t r1,
                          float rel_tol) {
  for (int t = 0; t < T; ++t)
    for (int64_t n = 0; n < ldy; ++n) {
      const float got = y[t * ldy + n];
      if (n < r0 || n >= r1) {
        ASSERT_EQ(got, kSentinel) << "row " << n << " outside [" << r0 << ", " << r1 << ") written";
        continue;
      }
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < c.in; ++k) {
        ref += double(x[t * ldx + k]) * c.w(n, k);
        mag += std::fabs(double(x[t * ldx + k]) * c.w(n, k));
      }
      ASSERT_NEAR(got, ref, rel_tol * mag + 1e-6) << "t=" << t << " n=" << n;
    }
}

}  // namespace

TEST(W4A16, RepackGemmAndGemvMatchDense) {
  for (const char* version : {"gemm", "gemv", "GEMM"}) {
    for (int g : {32, 64, 128}) {
      AwqCase c = make_values(24, 256, g, 7 + g);
      std::string v = version;
      if (v == "gemv")
        pack_gemv(c);
      else
        pack_gemm(c);
      const W4A16Matrix m = decode_awq(c.source(version, g));
      EXPECT_EQ(m.out, 24);
      EXPECT_EQ(m.in, 256);
      EXPECT_EQ(m.bytes(), 24u * 256 / 2 + 24u * (256 / g) * 3);
      const int T = 3;
      const auto x = random_x(T, 260, 1);
      std::vector<float> y(T * 24, kSentinel);
      w4a16_linear_ref(x.data(), T, 260, m, 0, 24, y.data(), 24);
      expect_matches_dense(c, x, T, 260, y, 24, 0, 24, 1e-5f);
    }
  }
}

TEST(W4A16, WholeRowGroup) {  // AutoAWQ group_size -1
  AwqCase c = make_values(16, 384, 384, 3);
  pack_gemm(c);
  const W4A16Matrix m = decode_awq(c.source("gemm", -1));
  EXPECT_EQ(m.group_size, 384);
  const auto x = random_x(1, 384, 2);
  std::vector<float> y(16, kSentinel);
  w4a16_linear(x.data(), 1, 384, m, 0, 16, y.data(), 16);
  expect_matches_dense(c, x, 1, 384, y, 16, 0, 16, 1e-5f);
}

TEST(W4A16, RepackErrors) {
  AwqCase c = make_values(16, 256, 128, 5);
  pack_gemm(c);
  {
    AwqTensors s = c.source("gemm", 128);
    s.scales.dtype = DType::F32;
    try {
      decode_awq(s);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer.scales"), std::string::npos) << e.what();
    }
  }
  {
    AwqTensors s = c.source("gemm", 128);
    s.qweight.shape = {256, 3};
    EXPECT_THROW(decode_awq(s), Error);
  }
  {
    AwqTensors s = c.source("gemm", 128);
    s.qzeros.dtype = DType::F16;
    EXPECT_THROW(decode_awq(s), Error);
  }
  EXPECT_THROW(decode_awq(c.source("gemv", 128)), Error);    // GEMM shapes are not GEMV's
  EXPECT_THROW(decode_awq(c.source("marlin", 128)), Error);  // unsupported version
  EXPECT_THROW(decode_awq(c.source("gemm", 96)), Error);     // 256 % 96 != 0
  EXPECT_THROW(decode_awq(c.source("gemm", 12)), Error);     // not a multiple of 8
}

TEST(W4A16, UnalignedTensors) {
  AwqCase c = make_values(8, 128, 128, 9);
  pack_gemm(c);
  std::vector<uint8_t> raw(c.qweight.size() * 4 + 1);
  std::memcpy(raw.data() + 1, c.qweight.data(), c.qweight.size() * 4);
  AwqTensors s = c.source("gemm", 128);
  s.qweight.data = raw.data() + 1;
  const W4A16Matrix m = decode_awq(s);
  const auto x = random_x(1, 128, 4);
  std::vector<float> y(8, kSentinel);
  w4a16_linear_ref(x.data(), 1, 128, m, 0, 8, y.data(), 8);
  expect_matches_dense(c, x, 1, 128, y, 8, 0, 8, 1e-5f);
}

TEST(W4A16, Avx2MatchesReference) {
  if (!w4a16_have_avx2()) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  struct Shape {
    int64_t out, in;
    int g;
  };
  const Shape shapes[] = {{8, 128, 128}, {40, 384, 128}, {72, 1280, 128},
                          {24, 640, 64}, {16, 256, 32},  {13 * 8, 896, 128}};
  uint32_t seed = 100;
  for (const Shape& sh : shapes) {
    AwqCase c = make_values(sh.out, sh.in, sh.g, seed++);
    pack_gemm(c);
    const W4A16Matrix m = decode_awq(c.source("gemm", sh.g));
    for (int T : {1, 2, 3, 4, 17, 50}) {
      const int64_t ldx = sh.in + 5, ldy = sh.out + 3;
      const auto x = random_x(T, ldx, seed++);
      // Full range, and a sub-range that does not start or end on a multiple of 4.
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, sh.out}, {1, sh.out - 2}}) {
        std::vector<float> yr(T * ldy, kSentinel), ya(T * ldy, kSentinel);
        w4a16_linear_ref(x.data(), T, ldx, m, r0, r1, yr.data(), ldy);
        w4a16_linear_avx2(x.data(), T, ldx, m, r0, r1, ya.data(), ldy);
        for (int t = 0; t < T; ++t)
          for (int64_t n = 0; n < ldy; ++n) {
            const float a = ya[t * ldy + n], r = yr[t * ldy + n];
            if (n < r0 || n >= r1) {
              ASSERT_EQ(a, kSentinel);
              continue;
            }
            double mag = 0;
            for (int64_t k = 0; k < sh.in; ++k) mag += std::fabs(x[t * ldx + k] * c.w(n, k));
            ASSERT_NEAR(a, r, 2e-6 * mag + 1e-6)
                << "out=" << sh.out << " in=" << sh.in << " g=" << sh.g << " T=" << T << " t=" << t
                << " n=" << n;
          }
        expect_matches_dense(c, x, T, ldx, ya, ldy, r0, r1, 2e-6f);
      }
    }
  }
}

TEST(W4A16, DispatchMatchesReference) {
  AwqCase c = make_values(16, 256, 128, 11);
  pack_gemv(c);
  const W4A16Matrix m = decode_awq(c.source("gemv", 128));
  const auto x = random_x(3, 256, 12);
  std::vector<float> y(3 * 16, kSentinel);
  w4a16_linear(x.data(), 3, 256, m, 0, 16, y.data(), 16);
  expect_matches_dense(c, x, 3, 256, y, 16, 0, 16, 2e-6f);
}

// int8 activations: within the rounding bound Σ_k |W[r,k]| · d_g(k) / 2 (d_g = max|x_g| / 127),
// and invariant to how tokens are grouped into calls.
TEST(W4A16, Q8ActivationsWithinRoundingBound) {
  if (!w4a16_have_avx2()) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  struct Shape {
    int64_t out, in;
    int g;
  };
  uint32_t seed = 300;
  for (const Shape& sh : {Shape{8, 128, 128}, Shape{40, 384, 128}, Shape{72, 1280, 128},
                          Shape{24, 640, 64}, Shape{13 * 8, 896, 128}}) {
    AwqCase c = make_values(sh.out, sh.in, sh.g, seed++);
    pack_gemm(c);
    const W4A16Matrix m = decode_awq(c.source("gemm", sh.g));
    for (int T : {1, 2, 3, 5, 17}) {
      const int64_t ldx = sh.in + 3, ldy = sh.out + 1;
      auto x = random_x(T, ldx, seed++);
      if (T > 1) x[ldx + 5] = 40.0f;  // an outlier coarsens its group's step
      std::vector<float> yq(T * ldy, kSentinel), yr(T * ldy, kSentinel);
      w4a16_linear_avx2_q8(x.data(), T, ldx, m, 1, sh.out, yq.data(), ldy);
      w4a16_linear_ref(x.data(), T, ldx, m, 1, sh.out, yr.data(), ldy);
      for (int t = 0; t < T; ++t) {
        std::vector<float> d(sh.in / sh.g);
        for (size_t g = 0; g < d.size(); ++g) {
          float amax = 0;
          for (int k = 0; k < sh.g; ++k)
            amax = std::max(amax, std::fabs(x[t * ldx + g * sh.g + k]));
          d[g] = amax / 127.0f;
        }
        for (int64_t n = 0; n < ldy; ++n) {
          if (n < 1 || n >= sh.out) {
            ASSERT_EQ(yq[t * ldy + n], kSentinel);
            continue;
          }
          double bound = 0, mag = 0;
          for (int64_t k = 0; k < sh.in; ++k) {
            bound += std::fabs(c.w(n, k)) * d[k / sh.g] / 2;
            mag += std::fabs(x[t * ldx + k] * c.w(n, k));
          }
          ASSERT_NEAR(yq[t * ldy + n], yr[t * ldy + n], bound * 1.001 + 2e-6 * mag + 1e-6)
              << "in=" << sh.in << " T=" << T << " t=" << t << " n=" << n;
        }
      }
      // Token by token gives bit-identical rows (batch invariance).
      for (int t = 0; t < T; ++t) {
        std::vector<float> y1(ldy, kSentinel);
        w4a16_linear_avx2_q8(x.data() + t * ldx, 1, ldx, m, 1, sh.out, y1.data(), ldy);
        for (int64_t n = 1; n < sh.out; ++n) ASSERT_EQ(y1[n], yq[t * ldy + n]) << t << " " << n;
      }
    }
  }
}

TEST(W4A16, Q8PolicyDefaultIsOff) {
  if (std::getenv("PERFX_W4A16_Q8")) GTEST_SKIP() << "PERFX_W4A16_Q8 is set";
  EXPECT_EQ(w4a16_q8_max_tokens(), 0);
}
