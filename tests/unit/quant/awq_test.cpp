// AWQ building blocks (FORMATS.md §1.3–§1.7) and the acceptance test of issue 4: on a synthetic
// layer with a few high-magnitude input channels, AWQ's output MSE is >= 2x lower than RTN's.
#include "quant/awq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "perfx/status.h"
#include "quant/int4.h"

using namespace perfx;
using namespace perfx::quant;

namespace {

LinearF32 random_linear(const std::string& name, int64_t out, int64_t in, float sd,
                        std::mt19937& rng) {
  LinearF32 L;
  L.name = name;
  L.out = out;
  L.in = in;
  L.w.resize(out * in);
  std::normal_distribution<float> nd(0.0f, sd);
  for (auto& v : L.w) v = nd(rng);
  return L;
}

/// Activations N(0,1) with a few salient channels multiplied by `gain`.
Matrix activations(int64_t n, int64_t c, const std::vector<int>& salient, float gain,
                   std::mt19937& rng) {
  Matrix x(n, c);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x.data) v = nd(rng);
  for (int64_t t = 0; t < n; ++t)
    for (int ch : salient) x.row(t)[ch] *= gain;
  return x;
}

/// The final (fp16-exact) quantization of a linear, dequantized back to fp32.
LinearF32 quantized(const LinearF32& L, int g) {
  const QuantizedMatrix q = quantize_fp16(L.w.data(), L.out, L.in, g, 4);
  LinearF32 r = L;
  dequantize(q, r.w.data());
  return r;
}

// ---- a small host decoder layer (the test's own attention / MLP) used as the BlockRunner ----

struct HostLayerRunner : BlockRunner {
  const LayerInputs* X = nullptr;
  int n_heads = 4, n_kv = 2, head_dim = 16, block = 32;  // tokens per calibration block

  void attention(const DecoderLayerF32& L, Matrix& out) { attention(L, L.q, L.k, L.v, out); }
  void mlp(const DecoderLayerF32& L, Matrix& out) { mlp(L, L.gate, L.up, out); }
  void attention(const DecoderLayerF32& L, const LinearF32& wq, const LinearF32& wk,
                 const LinearF32& wv, Matrix& out) override {
    Matrix q, k, v;
    matmul_wt(X->attn, wq, q);
    matmul_wt(X->attn, wk, k);
    matmul_wt(X->attn, wv, v);
    rope(q, n_heads);
    rope(k, n_kv);
    Matrix a(X->attn.rows, n_heads * head_dim);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    for (int64_t t = 0; t < a.rows; ++t) {
      const int64_t b0 = t / block * block;
      for (int h = 0; h < n_heads; ++h) {
        const int kh = h / (n_heads / n_kv);
        std::vector<double> p(static_cast<size_t>(t - b0 + 1));
        double mx = -1e30, sum = 0;
        for (int64_t u = b0; u <= t; ++u) {
          double s = 0;
          for (int d = 0; d < head_dim; ++d)
            s += q.row(t)[h * head_dim + d] * k.row(u)[kh * head_dim + d];
          p[u - b0] = s * scale;
          mx = std::max(mx, p[u - b0]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (int d = 0; d < head_dim; ++d) {
          double acc = 0;
          for (int64_t u = b0; u <= t; ++u) acc += p[u - b0] / sum * v.row(u)[kh * head_dim + d];
          a.row(t)[h * head_dim + d] = static_cast<float>(acc);
        }
      }
    }
    matmul_wt(a, L.o, out);
  }
  void mlp(const DecoderLayerF32& L, const LinearF32& wg, const LinearF32& wu,
           Matrix& out) override {
    Matrix g, u;
    matmul_wt(X->mlp, wg, g);
    matmul_wt(X->mlp, wu, u);
    for (size_t i = 0; i < g.data.size(); ++i)
      g.data[i] = g.data[i] / (1 + std::exp(-g.data[i])) * u.data[i];
    matmul_wt(g, L.down, out);
  }
  void rope(Matrix& m, int heads) const {
    for (int64_t t = 0; t < m.rows; ++t) {
      const int pos = static_cast<int>(t % block);
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < head_dim / 2; ++i) {
          const float f = pos * std::pow(10000.0f, -2.0f * i / head_dim);
          float* x = m.row(t) + h * head_dim;
          const float a = x[i], b = x[i + head_dim / 2];
          x[i] = a * std::cos(f) - b * std::sin(f);
          x[i + head_dim / 2] = b * std::cos(f) + a * std::sin(f);
        }
    }
  }
};

}  // namespace

TEST(Awq, ScalesForRatio) {
  const std::vector<float> xm = {0.5f, 2.0f, 8.0f, 1.0f};
  const std::vector<float> wm = {0.5f, 0.5f, 0.25f, 1.0f};
  for (float r : {0.0f, 0.35f, 0.95f}) {
    for (bool duo : {false, true}) {
      const std::vector<float> s = scales_for_ratio(xm, wm, r, duo);
      const float mx = *std::max_element(s.begin(), s.end());
      const float mn = *std::min_element(s.begin(), s.end());
      EXPECT_NEAR(mx * mn, 1.0f, 1e-5f);  // geometric-centre normalisation
      // Ratios between channels follow the formula.
      auto raw = [&](int c) {
        float v = std::pow(xm[c], r);
        if (duo) v /= std::pow(wm[c], 1 - r) + 1e-4f;
        return std::max(v, 1e-4f);
      };
      EXPECT_NEAR(s[2] / s[0], raw(2) / raw(0), 1e-4f * raw(2) / raw(0));
    }
  }
  const std::vector<float> one = scales_for_ratio(xm, wm, 0.0f, false);
  for (float v : one) EXPECT_FLOAT_EQ(v, 1.0f);  // α = 0 without duo scaling is RTN
  const std::vector<float> bad = scales_for_ratio({0.0f, 1.0f}, {1.0f, 1.0f}, 0.5f, false);
  for (float v : bad) EXPECT_TRUE(std::isfinite(v));
}

TEST(Awq, StatisticsByHand) {
  Matrix x(2, 3);
  x.data = {1, -2, 0, -3, 4, 1};
  EXPECT_EQ(activation_mean(x), (std::vector<float>{2, 3, 0.5f}));
  LinearF32 a;
  a.name = "a";
  a.out = 1;
  a.in = 4;
  a.w = {1, -2, 4, 0};  // groups of 2: max 2 -> [0.5, 1], max 4 -> [1, 0]
  LinearF32 b = a;
  b.w = {0, 0, -1, 1};  // group 1: max 0 -> [0, 0]; group 2: [1, 1]
  const std::vector<float> m = weight_mean({&a, &b}, 2);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_NEAR(m[0], 0.25f, 1e-5f);
  EXPECT_NEAR(m[1], 0.5f, 1e-5f);
  EXPECT_NEAR(m[2], 1.0f, 1e-5f);
  EXPECT_NEAR(m[3], 0.5f, 1e-5f);
  EXPECT_THROW(weight_mean({&a}, 3), Error);
}

TEST(Awq, ScaleFoldingPreservesTheFunction) {
  std::mt19937 rng(1);
  // Linear -> linear (v_proj -> o_proj style): y = (x Vᵀ) Oᵀ.
  LinearF32 v = random_linear("v_proj", 8, 6, 1.0f, rng),
            o = random_linear("o_proj", 5, 8, 1.0f, rng);
  v.bias = {1, 2, 3, 4, 5, 6, 7, 8};
  Matrix x = activations(3, 6, {}, 1.0f, rng), h, y0, y1;
  matmul_wt(x, v, h);
  matmul_wt(h, o, y0);
  const std::vector<float> s = {0.5f, 2, 3, 0.25f, 1, 4, 0.7f, 1.5f};
  apply_scales(s, nullptr, &v, {&o});
  matmul_wt(x, v, h);
  matmul_wt(h, o, y1);
  for (size_t i = 0; i < y0.data.size(); ++i) EXPECT_NEAR(y0.data[i], y1.data[i], 1e-4f);
  // Norm -> linear: (x ⊙ n) Wᵀ is unchanged by n /= s, W[:, c] *= s.
  std::vector<float> norm = {1, 2, 3, 4, 5, 6};
  LinearF32 w = random_linear("q_proj", 4, 6, 1.0f, rng);
  auto run = [&]() {
    Matrix xn = x, r;
    for (int64_t t = 0; t < xn.rows; ++t)
      for (int c = 0; c < 6; ++c) xn.row(t)[c] *= norm[c];
    matmul_wt(xn, w, r);
    return r;
  };
  const Matrix r0 = run();
  apply_scales({2, 0.5f, 1, 3, 0.1f, 7}, &norm, nullptr, {&w});
  const Matrix r1 = run();
  for (size_t i = 0; i < r0.data.size(); ++i) EXPECT_NEAR(r0.data[i], r1.data[i], 1e-4f);
}

TEST(Awq, ClipSearchShrinksAnIgnoredOutlier) {
  std::mt19937 rng(2);
  LinearF32 L = random_linear("down_proj", 4, 128, 0.02f, rng);
  L.w[5] = 1.0f;  // row 0: an outlier on a channel whose input is always 0
  Matrix x = activations(600, 128, {}, 1.0f, rng);
  for (int64_t t = 0; t < x.rows; ++t) x.row(t)[5] = 0.0f;
  AwqOptions o;
  const std::vector<float> m = search_clip(L, x, o);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_NEAR(m[0], 0.55f, 1e-6f);  // the strongest shrink: the outlier costs nothing
  for (int r = 1; r < 4; ++r) {
    float mx = 0;
    for (int j = 0; j < 128; ++j) mx = std::max(mx, std::fabs(L.w[r * 128 + j]));
    EXPECT_GE(m[r], 0.55f * mx - 1e-7f);
    EXPECT_LE(m[r], mx);
  }
  EXPECT_TRUE(clip_excluded("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(clip_excluded("model.layers.0.self_attn.k_proj"));
  EXPECT_FALSE(clip_excluded("model.layers.0.self_attn.v_proj"));
  EXPECT_FALSE(clip_excluded("model.layers.0.mlp.down_proj"));
}

// Issue 4 acceptance: one linear whose input has a few high-magnitude channels.
TEST(Awq, SyntheticSalientChannelsBeatRtnByTwo) {
  std::mt19937 rng(3);
  const int64_t in = 512, out = 256, n = 1024;
  const std::vector<int> salient = {3, 77, 130, 200, 301, 390, 450, 500};
  const Matrix x = activations(n, in, salient, 25.0f, rng);
  const LinearF32 W = random_linear("model.layers.0.mlp.down_proj", out, in, 0.02f, rng);
  Matrix ref;
  matmul_wt(x, W, ref);

  // RTN: the final quantizer alone.
  Matrix y_rtn;
  matmul_wt(x, quantized(W, 128), y_rtn);
  const double mse_rtn = mse(ref, y_rtn);

  // AWQ: scale search with the linear as the inspected block, fold, clip, quantize.
  AwqOptions o;
  float ratio = -1;
  auto loss = [&](const std::vector<float>& s) {
    LinearF32 T = W;
    fake_quantize_scaled(T, s, o);
    Matrix y;
    matmul_wt(x, T, y);
    return mse(ref, y);
  };
  const std::vector<float> s =
      search_scales(activation_mean(x), weight_mean({&W}, 128), o, loss, &ratio);
  LinearF32 Ws = W;
  apply_scales(s, nullptr, nullptr, {&Ws});
  Matrix xs = x;
  divide_columns(xs, s);
  apply_clip(Ws, search_clip(Ws, xs, o), 128);
  Matrix y_awq;
  matmul_wt(xs, quantized(Ws, 128), y_awq);
  const double mse_awq = mse(ref, y_awq);
  std::printf("synthetic layer: MSE RTN %.4g, AWQ %.4g (ratio %.2f, alpha %.2f)\n", mse_rtn,
              mse_awq, mse_rtn / mse_awq, ratio);
  EXPECT_GT(ratio, 0.0f);
  EXPECT_LE(mse_awq * 2.0, mse_rtn);
}

TEST(Awq, LayerEndToEndBeatsRtn) {
  std::mt19937 rng(4);
  const int64_t H = 128, I = 256, N = 128;
  HostLayerRunner runner;  // 4 heads of 16 + 2 KV heads: GQA, so group 2 is skipped
  runner.head_dim = 32;
  DecoderLayerF32 L;
  L.attn_norm.assign(H, 1.0f);
  L.ffn_norm.assign(H, 1.0f);
  L.q = random_linear("model.layers.0.self_attn.q_proj", 128, H, 0.08f, rng);
  L.k = random_linear("model.layers.0.self_attn.k_proj", 64, H, 0.08f, rng);
  L.v = random_linear("model.layers.0.self_attn.v_proj", 64, H, 0.08f, rng);
  L.o = random_linear("model.layers.0.self_attn.o_proj", H, 128, 0.08f, rng);
  L.gate = random_linear("model.layers.0.mlp.gate_proj", I, H, 0.08f, rng);
  L.up = random_linear("model.layers.0.mlp.up_proj", I, H, 0.08f, rng);
  L.down = random_linear("model.layers.0.mlp.down_proj", H, I, 0.08f, rng);
  LayerInputs X;
  X.attn = activations(N, H, {5, 60, 100}, 20.0f, rng);
  X.mlp = activations(N, H, {7, 90}, 20.0f, rng);
  runner.X = &X;
  // The o_proj / down_proj inputs as the fp layer produces them.
  {
    Matrix v;
    matmul_wt(X.attn, L.v, v);
    X.o = Matrix(N, 128);
    for (int64_t t = 0; t < N; ++t)
      for (int c = 0; c < 128; ++c) X.o.row(t)[c] = v.row(t)[c % 64];
    Matrix g, u;
    matmul_wt(X.mlp, L.gate, g);
    matmul_wt(X.mlp, L.up, u);
    X.down = Matrix(N, I);
    for (size_t i = 0; i < g.data.size(); ++i)
      X.down.data[i] = g.data[i] / (1 + std::exp(-g.data[i])) * u.data[i];
  }
  const LayerInputs X0 = X;
  Matrix ref_attn, ref_mlp;
  runner.attention(L, ref_attn);
  runner.mlp(L, ref_mlp);

  auto quantize_all = [](DecoderLayerF32 D) {
    for (LinearF32* l : {&D.q, &D.k, &D.v, &D.o, &D.gate, &D.up, &D.down}) *l = quantized(*l, 128);
    return D;
  };
  // RTN.
  Matrix a_rtn, m_rtn;
  runner.attention(quantize_all(L), a_rtn);
  runner.mlp(quantize_all(L), m_rtn);
  // AWQ: the folded norm weights scale the (normed) block inputs.
  DecoderLayerF32 A = L;
  AwqLayerReport rep;
  awq_layer(A, X, runner, AwqOptions{}, &rep);
  EXPECT_EQ(rep.best_ratio[1], -1.0f);  // GQA: no v_proj -> o_proj group
  for (int g : {0, 2, 3}) {
    EXPECT_GE(rep.best_ratio[g], 0.0f);
    EXPECT_LE(rep.best_loss[g], rep.rtn_loss[g] * 1.0000001 + 1e-30);
  }
  LayerInputs Xn = X0;
  for (int64_t t = 0; t < N; ++t)
    for (int c = 0; c < H; ++c) {
      Xn.attn.row(t)[c] *= A.attn_norm[c];
      Xn.mlp.row(t)[c] *= A.ffn_norm[c];
    }
  runner.X = &Xn;
  Matrix a_awq, m_awq;
  const DecoderLayerF32 Q = quantize_all(A);
  runner.attention(Q, a_awq);
  runner.mlp(Q, m_awq);
  std::printf("layer: attn MSE RTN %.4g AWQ %.4g; mlp MSE RTN %.4g AWQ %.4g\n",
              mse(ref_attn, a_rtn), mse(ref_attn, a_awq), mse(ref_mlp, m_rtn), mse(ref_mlp, m_awq));
  EXPECT_LT(mse(ref_attn, a_awq), mse(ref_attn, a_rtn));
  EXPECT_LT(mse(ref_mlp, m_awq), mse(ref_mlp, m_rtn));
}
