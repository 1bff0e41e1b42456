// Int8-activation linear (backend/cpu/qlinear.h): the repack keeps every weight, the vectorised
// activation quantizer equals the reference bit for bit, every available ISA's kernels equal the
// plain reference up to fp32 summation order (relative L2 <= 1e-5), and the reference is within the
// stated bound of exact fp32 activations: |y − y_exact| <= Σ_k |W[r,k]|·d_b(k)/2 (+ fp32 rounding),
// which on N(0, 1) activations is a relative L2 error <= 1e-2.
#include "backend/cpu/qlinear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "support/test_support.h"

using namespace perfx;
using namespace perfx::cpu;

namespace {

enum class Kind { Awq, Q4_0, Q4_1, Q8_0 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Awq:
      return "awq";
    case Kind::Q4_0:
      return "q4_0";
    case Kind::Q4_1:
      return "q4_1";
    case Kind::Q8_0:
      return "q8_0";
  }
  return "?";
}

/// A random weight of `kind` as canonical matrices split into parts (rows stacked) + dequantized.
struct Weight {
  std::vector<Int4Matrix> i4;
  std::vector<Int8Matrix> i8;
  std::vector<double> deq;  // [out, in]
  QMatrix q;
};

Weight make(Kind kind, const std::vector<int64_t>& outs, int64_t in, int g, uint32_t seed) {
  std::mt19937 rng(seed);
  Weight w;
  int64_t total = 0;
  for (int64_t o : outs) total += o;
  w.deq.assign((size_t)(total * in), 0.0);
  int64_t row = 0;
  for (int64_t out : outs) {
    if (kind == Kind::Q8_0) {
      Int8Matrix m;
      m.out = out;
      m.in = in;
      m.group_size = 32;
      m.q.resize((size_t)(out * in));
      m.scales.resize((size_t)(out * in / 32));
      for (auto& v : m.q) v = (int8_t)((int)(rng() % 255) - 127);
      m.q[0] = -128;  // the extreme byte too
      for (auto& s : m.scales) s = fp32_to_fp16(0.001f + 0.01f * (float)(rng() % 1000) / 1000.0f);
      for (int64_t r = 0; r < out; ++r)
        for (int64_t k = 0; k < in; ++k) w.deq[(size_t)((row + r) * in + k)] = m.dequant(r, k);
      w.i8.push_back(std::move(m));
    } else {
      Int4Matrix m;
      m.out = out;
      m.in = in;
      m.group_size = g;
      const int64_t G = in / g;
      m.q.assign((size_t)(out * in / 8), 0);
      for (int64_t i = 0; i < out * in; ++i)
        m.q[(size_t)(i / 8)] |= (uint32_t)(rng() % 16) << (4 * (i % 8));
      m.q[0] |= 0xF0000000u;  // a top nibble set (sign bit of the word)
      m.scales.resize((size_t)(out * G));
      for (auto& s : m.scales) s = fp32_to_fp16(0.005f + 0.03f * (float)(rng() % 1000) / 1000.0f);
      if (kind == Kind::Q4_1) {
        m.mins.resize((size_t)(out * G));
        for (auto& v : m.mins) v = fp32_to_fp16(-0.2f * (float)(rng() % 1000) / 1000.0f);
      } else {
        m.zeros.resize((size_t)(out * G));
        for (auto& z : m.zeros) z = kind == Kind::Q4_0 ? 8 : (uint8_t)(rng() % 16);
      }
      for (int64_t r = 0; r < out; ++r)
        for (int64_t k = 0; k < in; ++k) w.deq[(size_t)((row + r) * in + k)] = m.dequant(r, k);
      w.i4.push_back(std::move(m));
    }
    row += out;
  }
  if (kind == Kind::Q8_0) {
    std::vector<const Int8Matrix*> p;
    for (auto& m : w.i8) p.push_back(&m);
    w.q = qmatrix_from_int8(p);
  } else {
    std::vector<const Int4Matrix*> p;
    for (auto& m : w.i4) p.push_back(&m);
    w.q = qmatrix_from_int4(p);
  }
  return w;
}

std::vector<float> activations(int T, int64_t in, uint32_t seed) {
  auto x = test::random_normal((size_t)(T * in), seed);
  // Blocks of very different magnitude, and one block of zeros (d = 0).
  for (int t = 0; t < T; ++t)
    for (int64_t k = 0; k < in; ++k) x[(size_t)(t * in + k)] *= 1.0f + (float)((k / 32) % 5);
  if (in >= 64)
    for (int64_t k = 32; k < 64; ++k) x[(size_t)k] = 0.0f;
  return x;
}

double rel_l2(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST(QMatrix, RepackKeepsEveryWeight) {
  for (Kind kind : {Kind::Awq, Kind::Q4_0, Kind::Q4_1, Kind::Q8_0}) {
    const Weight w = make(kind, {5, 16, 13}, 96, 32, 7);
    EXPECT_EQ(w.q.out, 34);
    EXPECT_EQ(w.q.tiles, 3);
    EXPECT_EQ(w.q.offset, kind == Kind::Awq    ? QOffset::Zeros
                          : kind == Kind::Q4_1 ? QOffset::Mins
                                               : QOffset::Const);
    for (int64_t r = 0; r < w.q.out; ++r)
      for (int64_t k = 0; k < w.q.in; ++k)
        ASSERT_EQ(w.q.dequant(r, k), (float)w.deq[(size_t)(r * w.q.in + k)])
            << kind_name(kind) << " r=" << r << " k=" << k;
  }
}

TEST(QActivations, VectorisedQuantizerEqualsReference) {
  for (int64_t in : {32, 96, 2048 + 32}) {
    const int T = 5;
    const auto x = activations(T, in + 3, 11);  // row stride in + 3
    QActivations a, b;
    a.resize(T, in);
    b.resize(T, in);
    quantize_act_ref(x.data(), in + 3, 0, T, a);
    quantize_act(x.data(), in + 3, 0, 2, b);
    quantize_act(x.data(), in + 3, 2, T, b);
    for (size_t i = 0; i < (size_t)(T * in); ++i)
      ASSERT_EQ(a.q[i], b.q[i]) << "in=" << in << " i=" << i;
    for (size_t i = 0; i < (size_t)(T * in / 32); ++i) {
      ASSERT_EQ(a.d[i], b.d[i]);
      ASSERT_EQ(a.qsum[i], b.qsum[i]);
      ASSERT_EQ(a.xsum[i], b.xsum[i]);
      ASSERT_TRUE(a.d[i] > 0.0f || i == 1) << "only block 1 of token 0 is all zeros";
    }
  }
}

struct Case {
  Kind kind;
  std::vector<int64_t> outs;
  int64_t in;
  int g;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {Kind::Awq, {37}, 384, 128},       {Kind::Awq, {24, 8, 8}, 160, 32},
      {Kind::Awq, {72}, 320, 64},        {Kind::Awq, {130}, 1024, 128},
      {Kind::Q4_0, {67}, 160, 32},       {Kind::Q4_0, {5, 3, 3}, 96, 32},
      {Kind::Q4_1, {33}, 96, 32},        {Kind::Q4_1, {48}, 288, 32},
      {Kind::Q8_0, {40, 8, 8}, 288, 32}, {Kind::Q8_0, {1}, 32, 32},
      {Kind::Q8_0, {29}, 2080, 32},
  };
  return c;
}

TEST(QLinear, ReferenceWithinStatedBoundOfExactActivations) {
  for (const Case& c : cases()) {
    const Weight w = make(c.kind, c.outs, c.in, c.g, 3);
    for (int T : {1, 3, 9}) {
      const auto x = activations(T, c.in, 5);
      QActivations a;
      a.resize(T, c.in);
      quantize_act_ref(x.data(), c.in, 0, T, a);
      std::vector<float> y((size_t)(T * w.q.out), NAN);
      qlinear_ref(a, w.q, 0, w.q.tiles, y.data(), w.q.out);
      std::vector<double> exact((size_t)(T * w.q.out));
      for (int t = 0; t < T; ++t)
        for (int64_t r = 0; r < w.q.out; ++r) {
          double s = 0, bound = 0, mag = 0;
          for (int64_t k = 0; k < c.in; ++k) {
            const double wk = w.deq[(size_t)(r * c.in + k)];
            s += wk * x[(size_t)(t * c.in + k)];
            bound += std::fabs(wk) * a.d[(size_t)(t * (c.in / 32) + k / 32)] / 2;
            mag += std::fabs(wk * x[(size_t)(t * c.in + k)]);
          }
          exact[(size_t)(t * w.q.out + r)] = s;
          const double got = y[(size_t)(t * w.q.out + r)];
          EXPECT_LE(std::fabs(got - s), bound + 1e-5 * mag + 1e-6)
              << kind_name(c.kind) << " T=" << T << " r=" << r;
        }
      EXPECT_LE(rel_l2(y, exact), 1e-2) << kind_name(c.kind) << " in=" << c.in << " T=" << T;
    }
  }
}

TEST(QLinear, EveryIsaEqualsReference) {
  int tested = 0;
  for (QIsa isa : {QIsa::Avx2, QIsa::AvxVnni, QIsa::Avx512Vnni, QIsa::Neon}) {
    if (!qisa_available(isa)) continue;
    ++tested;
    for (const Case& c : cases()) {
      const Weight w = make(c.kind, c.outs, c.in, c.g, 9);
      for (int T : {1, 2, 3, 4, 5, 8, 9, 17, 70}) {
        const auto x = activations(T, c.in, 13 + T);
        QActivations a;
        a.resize(T, c.in);
        quantize_act(x.data(), c.in, 0, T, a);
        const int64_t ldy = w.q.out + 3;
        std::vector<float> ref((size_t)(T * ldy), NAN), got((size_t)(T * ldy), NAN);
        qlinear_ref(a, w.q, 0, w.q.tiles, ref.data(), ldy);
        // Two calls over split tile ranges, as threads do.
        const int64_t mid = w.q.tiles / 2;
        qlinear_isa(isa, a, w.q, 0, mid, got.data(), ldy);
        qlinear_isa(isa, a, w.q, mid, w.q.tiles, got.data(), ldy);
        std::vector<double> refd;
        std::vector<float> gotv;
        for (int t = 0; t < T; ++t)
          for (int64_t r = 0; r < ldy; ++r) {
            const size_t i = (size_t)(t * ldy + r);
            if (r >= w.q.out) {
              ASSERT_TRUE(std::isnan(got[i])) << "wrote past the last row";
              continue;
            }
            ASSERT_FALSE(std::isnan(got[i])) << qisa_name(isa) << " left row " << r << " unwritten";
            refd.push_back(ref[i]);
            gotv.push_back(got[i]);
          }
        EXPECT_LE(rel_l2(gotv, refd), 1e-5)
            << qisa_name(isa) << " " << kind_name(c.kind) << " in=" << c.in << " T=" << T;
      }
    }
  }
  std::printf("  ISAs tested: %d (best here: %s)\n", tested, qisa_name(qisa_best()));
}

}  // namespace
