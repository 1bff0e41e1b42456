// The blocked GEMM (gemm.h) and the CPU backend's linear built on it, against plain references,
// on random odd-sized inputs: token counts around the micro-tile (6) and the token block (96),
// widths around the 256-column panel (and not multiples of 8), row ranges with full 16-row panels,
// several panels and a partial one, at odd offsets.
#include "backend/cpu/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reference.h"
#include "core/dtype.h"
#include "support/test_support.h"

using namespace perfx;
using namespace perfx::cpu;
using perfx::test::random_normal;

namespace {

/// A plain fp32 matrix [out, in] as panels.
class F32Panels final : public PanelSource {
 public:
  F32Panels(const std::vector<float>& w, int64_t in) : w_(w), in_(in) {}
  void fill(int64_t r, int nr, int64_t k0, int64_t kn, float* buf) const override {
    for (int i = 0; i < nr; ++i)
      for (int64_t j = 0; j < kn; ++j) buf[i * kGemmKBlock + j] = w_[(r + i) * in_ + k0 + j];
  }

 private:
  const std::vector<float>& w_;
  int64_t in_;
};

/// Allowed |Δ| for a length-n fp32 dot of values ~N(0,1) summed in another order.
float tol(int64_t n) {
  return 2e-6f * static_cast<float>(n) + 1e-5f;
}

}  // namespace

void check_gemm(int64_t in, int T, int64_t out, int64_t r0, int64_t r1) {
  const auto x = random_normal(static_cast<size_t>(T * (in + 3)), 1),
             w = random_normal(out * in, 2);
  const int64_t ldx = in + 3, ldy = out + 5;  // strided rows on both sides
  std::vector<float> y(static_cast<size_t>(T * ldy), 12345.0f);
  gemm_nt(x.data(), T, ldx, in, F32Panels(w, in), r0, r1, y.data(), ldy);
  for (int t = 0; t < T; ++t)
    for (int64_t r = 0; r < out; ++r) {
      const float got = y[t * ldy + r];
      if (r < r0 || r >= r1) {
        ASSERT_EQ(got, 12345.0f) << "row " << r << " outside [r0, r1) was written";
        continue;
      }
      double ref = 0;
      for (int64_t k = 0; k < in; ++k) ref += double(x[t * ldx + k]) * w[r * in + k];
      ASSERT_NEAR(got, ref, tol(in)) << "in=" << in << " T=" << T << " t=" << t << " r=" << r;
    }
}

TEST(Gemm, MatchesDoublePrecisionReference) {
  // One partial panel (rows 2..10).
  for (int64_t in : {1, 7, 8, 100, 255, 256, 257, 513, 1031})
    for (int T : {1, 2, 3, 5, 6, 7, 47, 49, 100}) check_gemm(in, T, 13, 2, 11);
  // Rows 3..43: two full 16-row panels (both store paths of the micro-tile) and a partial one;
  // columns exactly one and two panels wide, and past them; tokens around the 96-token block.
  for (int64_t in : {256, 300, 512})
    for (int T : {6, 95, 96, 97, 193}) check_gemm(in, T, 45, 3, 44);
}

TEST(Gemm, EmptyWidthGivesZerosAndEmptyRangesWriteNothing) {
  std::vector<float> w, x(8, 1.0f), y(8, 7.0f);
  gemm_nt(x.data(), 2, 4, 0, F32Panels(w, 0), 0, 3, y.data(), 4);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 7, 0, 0, 0, 7}));
  gemm_nt(x.data(), 0, 4, 4, F32Panels(w, 4), 0, 3, y.data(), 4);
  gemm_nt(x.data(), 2, 4, 4, F32Panels(w, 4), 2, 2, y.data(), 4);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 7, 0, 0, 0, 7}));
}

// Through the backend: fused parts of different stored dtypes, T = 1 (dot path), T = 2..4 (16-bit
// rows: dot_16bit_rows, odd row counts) and T > 4 (GEMM; the Q8_0 part's panels start at column
// offsets 0 and 256 inside its blocks),
// against dequantize_row + dot_ref.
TEST(Gemm, BackendLinearMatchesReferenceForEveryDenseDtype) {
  const int64_t in = 576;  // one full 512-column panel + 64 (a multiple of the GGUF block, 32)
  constexpr int kParts = 4;
  const int64_t outs[kParts] = {5, 12, 7, 3};
  const DType types[kParts] = {DType::BF16, DType::F16, DType::F32, DType::Q8_0};
  std::vector<std::vector<uint8_t>> storage(kParts);
  std::vector<LinearSource> parts;
  std::vector<std::vector<float>> dense;  // each part dequantized, [out, in]
  for (int p = 0; p < kParts; ++p) {
    const auto w = random_normal(static_cast<size_t>(outs[p] * in), 10 + p);
    storage[p].resize(dtype_row_bytes(types[p], in) * outs[p] + 1);
    uint8_t* base = storage[p].data() + 1;  // unaligned on purpose (safetensors offsets are)
    for (int64_t i = 0; i < outs[p] * in && types[p] == DType::Q8_0; i += 32) {
      // GGUF Q8_0 block: fp16 scale d = max|w| / 127, then 32 int8 q = round(w / d).
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(w[i + j]));
      const float d = amax / 127;
      const uint16_t dh = fp32_to_fp16(d);
      uint8_t* blk = base + (i / 32) * 34;
      std::memcpy(blk, &dh, 2);
      for (int j = 0; j < 32; ++j)
        blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(w[i + j] / d)));
    }
    for (int64_t i = 0; i < outs[p] * in && types[p] != DType::Q8_0; ++i) {
      if (types[p] == DType::F32) {
        std::memcpy(base + 4 * i, &w[i], 4);
      } else {
        const uint16_t h = types[p] == DType::BF16 ? fp32_to_bf16(w[i]) : fp32_to_fp16(w[i]);
        std::memcpy(base + 2 * i, &h, 2);
      }
    }
    LinearSource s;
    s.weight.name = std::string("w").append(std::to_string(p));
    s.weight.dtype = types[p];
    s.weight.shape = {outs[p], in};
    s.weight.data = base;
    s.weight.nbytes = storage[p].size() - 1;
    s.out = outs[p];
    s.in = in;
    parts.push_back(s);
    std::vector<float> d(static_cast<size_t>(outs[p] * in));
    for (int64_t r = 0; r < outs[p]; ++r)
      dequantize_row(types[p], base + r * dtype_row_bytes(types[p], in), d.data() + r * in, in);
    dense.push_back(std::move(d));
  }
  auto be = create_cpu_backend(2);
  auto wt = be->load_linear(parts);
  ASSERT_EQ(wt->out, 27);
  {  // Bug: T = 0 fell through to the one-token loop and wrote every row of y from x row 0.
    std::vector<float> x(1), y(1, 3.0f);
    Tensor xt{x.data(), DType::F32, 0, in, in}, yt{y.data(), DType::F32, 0, 27, 27};
    be->linear(xt, *wt, nullptr, yt);
    EXPECT_EQ(y[0], 3.0f);
  }
  for (int T : {1, 2, 3, 4, 5, 50}) {
    auto x = random_normal(static_cast<size_t>(T * in), 20 + T);
    std::vector<float> y(static_cast<size_t>(T * 27));
    Tensor xt{x.data(), DType::F32, T, in, in}, yt{y.data(), DType::F32, T, 27, 27};
    be->linear(xt, *wt, nullptr, yt);
    for (int t = 0; t < T; ++t) {
      int64_t row = 0;
      for (int p = 0; p < kParts; ++p)
        for (int64_t r = 0; r < outs[p]; ++r, ++row) {
          const float ref = dot_ref(x.data() + t * in, dense[p].data() + r * in, in);
          ASSERT_NEAR(y[t * 27 + row], ref, tol(in)) << "T=" << T << " t=" << t << " row=" << row;
        }
    }
  }
}
