// AWQ scale search, folding and clip search for one decoder layer. Formulas: FORMATS.md §1.3–§1.9
// (AutoAWQ awq/quantize/quantizer.py `_search_best_scale`, `_compute_best_clip`, scale.py
// `apply_scale`; paper arXiv 2306.00978).
#include "quant/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/simd.h"
#include "core/thread_pool.h"
#include "perfx/status.h"
#include "quant/int4.h"

namespace perfx::quant {
namespace {

void parallel(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool && n > 1)
    pool->parallel_for(n, fn);
  else
    fn(0, n);
}

bool can_quantize(const LinearF32& L, const AwqOptions& o) {
  return L.quantize && o.group_size > 0 && L.in % o.group_size == 0;
}

}  // namespace

void matmul_wt(const Matrix& x, const LinearF32& L, Matrix& y, ThreadPool* pool) {
  check(x.cols == L.in, "matmul: input width " + std::to_string(x.cols) + " != in_features " +
                            std::to_string(L.in) + " of " + L.name);
  if (y.rows != x.rows || y.cols != L.out) y = Matrix(x.rows, L.out);
  constexpr int64_t kTok = 16;
  const int64_t nb = (x.rows + kTok - 1) / kTok;
  parallel(pool, nb, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * kTok, t1 = std::min(x.rows, t0 + kTok);
      for (int64_t j = 0; j < L.out; ++j) {
        const float* wj = L.w.data() + j * L.in;
        const float bj = L.bias.empty() ? 0.0f : L.bias[static_cast<size_t>(j)];
        for (int64_t t = t0; t < t1; ++t) y.row(t)[j] = cpu::dot(x.row(t), wj, L.in) + bj;
      }
    }
  });
}

std::vector<float> activation_mean(const Matrix& x) {
  std::vector<double> sum(static_cast<size_t>(x.cols), 0.0);
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) sum[static_cast<size_t>(c)] += std::fabs(r[c]);
  }
  std::vector<float> m(static_cast<size_t>(x.cols));
  for (size_t c = 0; c < m.size(); ++c)
    m[c] = static_cast<float>(sum[c] / static_cast<double>(std::max<int64_t>(1, x.rows)));
  return m;
}

std::vector<float> weight_mean(const std::vector<const LinearF32*>& linears, int group_size) {
  check(!linears.empty(), "weight_mean: no linears");
  const int64_t in = linears[0]->in;
  std::vector<double> sum(static_cast<size_t>(in), 0.0);
  int64_t rows = 0;
  for (const LinearF32* L : linears) {
    check(L->in == in && in % group_size == 0, "weight_mean: " + L->name + " has in_features " +
                                                   std::to_string(L->in) + " (group size " +
                                                   std::to_string(group_size) + ")");
    for (int64_t r = 0; r < L->out; ++r, ++rows) {
      const float* w = L->w.data() + r * in;
      for (int64_t g = 0; g < in; g += group_size) {
        float mx = 0.0f;
        for (int j = 0; j < group_size; ++j) mx = std::max(mx, std::fabs(w[g + j]));
        const float inv = 1.0f / (mx + 1e-6f);
        for (int j = 0; j < group_size; ++j)
          sum[static_cast<size_t>(g + j)] += std::fabs(w[g + j]) * inv;
      }
    }
  }
  std::vector<float> m(static_cast<size_t>(in));
  for (size_t c = 0; c < m.size(); ++c)
    m[c] = static_cast<float>(sum[c] / static_cast<double>(rows));
  return m;
}

std::vector<float> scales_for_ratio(const std::vector<float>& x_mean,
                                    const std::vector<float>& w_mean, float ratio, bool duo) {
  std::vector<float> s(x_mean.size());
  for (size_t c = 0; c < s.size(); ++c) {
    float v = std::pow(x_mean[c], ratio);
    if (duo) v = v / (std::pow(w_mean[c], 1.0f - ratio) + 1e-4f);
    s[c] = std::max(v, 1e-4f);  // NaN stays NaN (fixed below)
  }
  float mx = -INFINITY, mn = INFINITY;
  for (float v : s) {
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  const float norm = std::sqrt(mx * mn);
  for (float& v : s) {
    v /= norm;
    if (!std::isfinite(v)) v = 1.0f;
  }
  return s;
}

double mse(const Matrix& a, const Matrix& b) {
  check(a.data.size() == b.data.size(), "mse: size mismatch");
  double acc = 0.0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const double d = static_cast<double>(a.data[i]) - b.data[i];
    acc += d * d;
  }
  return a.data.empty() ? 0.0 : acc / static_cast<double>(a.data.size());
}

void fake_quantize_scaled(LinearF32& L, const std::vector<float>& s, const AwqOptions& o) {
  if (!can_quantize(L, o)) return;
  if (!s.empty()) {
    check(static_cast<int64_t>(s.size()) == L.in, "fake_quantize_scaled: scale size mismatch");
    for (int64_t r = 0; r < L.out; ++r)
      for (int64_t c = 0; c < L.in; ++c) L.w[static_cast<size_t>(r * L.in + c)] *= s[c];
  }
  fake_quantize(L.w.data(), L.out, L.in, o.group_size, o.w_bit);
  if (!s.empty()) {
    for (int64_t r = 0; r < L.out; ++r)
      for (int64_t c = 0; c < L.in; ++c) L.w[static_cast<size_t>(r * L.in + c)] /= s[c];
  }
}

std::vector<float> search_scales(const std::vector<float>& x_mean, const std::vector<float>& w_mean,
                                 const AwqOptions& o,
                                 const std::function<double(const std::vector<float>&)>& loss,
                                 float* best_ratio, double* best_loss) {
  double best = std::numeric_limits<double>::infinity();
  float best_r = -1.0f;
  std::vector<float> best_s;
  for (int i = 0; i < o.n_grid; ++i) {
    const float ratio = static_cast<float>(i) / static_cast<float>(o.n_grid);
    std::vector<float> s = scales_for_ratio(x_mean, w_mean, ratio, o.duo_scaling);
    const double l = loss(s);
    if (l < best) {  // NaN never wins; ties keep the smaller α
      best = l;
      best_r = ratio;
      best_s = std::move(s);
    }
  }
  check(best_r >= 0.0f, "AWQ scale search: no finite loss over the α grid");
  if (best_ratio) *best_ratio = best_r;
  if (best_loss) *best_loss = best;
  return best_s;
}

void apply_scales(const std::vector<float>& s, std::vector<float>* norm, LinearF32* prev_linear,
                  const std::vector<LinearF32*>& next) {
  const int64_t n = static_cast<int64_t>(s.size());
  if (norm) {
    check(static_cast<int64_t>(norm->size()) == n, "apply_scales: norm size mismatch");
    for (int64_t c = 0; c < n; ++c) (*norm)[c] /= s[c];
  }
  if (prev_linear) {
    check(prev_linear->out >= n, "apply_scales: previous linear too small");
    const int64_t r0 = prev_linear->out - n;  // the last len(s) rows
    for (int64_t r = 0; r < n; ++r) {
      float* w = prev_linear->w.data() + (r0 + r) * prev_linear->in;
      for (int64_t c = 0; c < prev_linear->in; ++c) w[c] /= s[r];
    }
    if (!prev_linear->bias.empty())
      for (int64_t r = 0; r < n; ++r) prev_linear->bias[static_cast<size_t>(r0 + r)] /= s[r];
  }
  for (LinearF32* L : next) {
    check(L->in == n, "apply_scales: " + L->name + " in_features != scale size");
    for (int64_t r = 0; r < L->out; ++r) {
      float* w = L->w.data() + r * L->in;
      for (int64_t c = 0; c < n; ++c) w[c] *= s[c];
    }
  }
}

void divide_columns(Matrix& x, const std::vector<float>& s) {
  check(static_cast<int64_t>(s.size()) == x.cols, "divide_columns: size mismatch");
  for (int64_t t = 0; t < x.rows; ++t) {
    float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) r[c] /= s[c];
  }
}

bool clip_excluded(const std::string& name) {
  const std::string leaf =
      name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
  for (const char* pat : {"q_", "k_", "query", "key", "Wqkv"})
    if (leaf.find(pat) != std::string::npos) return true;
  return false;
}

std::vector<float> search_clip(const LinearF32& L, const Matrix& x, const AwqOptions& o) {
  check(x.cols == L.in, "clip search: input width mismatch for " + L.name);
  const int gs = o.group_size;
  check(L.in % gs == 0, "clip search: " + L.name + " in_features not a multiple of the group size");
  const int64_t G = L.in / gs;
  // Token subsample: every step-th token, step = max(1, N // n_sample_token).
  const int64_t step = std::max<int64_t>(1, x.rows / o.clip_n_tokens);
  std::vector<const float*> tok;
  for (int64_t t = 0; t < x.rows; t += step) tok.push_back(x.row(t));
  const int n_shrink = static_cast<int>(o.max_shrink * static_cast<float>(o.clip_n_grid));
  std::vector<float> best(static_cast<size_t>(L.out * G));
  parallel(o.pool, L.out, [&](int64_t r0, int64_t r1) {
    std::vector<float> cur(static_cast<size_t>(gs)), d(static_cast<size_t>(gs));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < G; ++g) {
        const float* w = L.w.data() + r * L.in + g * gs;
        float org_max = 0.0f;
        for (int j = 0; j < gs; ++j) org_max = std::max(org_max, std::fabs(w[j]));
        float best_max = org_max;
        double min_err = 1e9;
        for (int i = 0; i < n_shrink; ++i) {
          const float m =
              org_max * (1.0f - static_cast<float>(i) / static_cast<float>(o.clip_n_grid));
          for (int j = 0; j < gs; ++j) cur[j] = std::clamp(w[j], -m, m);
          fake_quantize_group(cur.data(), gs, o.w_bit);
          for (int j = 0; j < gs; ++j) d[j] = cur[j] - w[j];
          double err = 0.0;
          for (const float* xt : tok) {
            const double e = cpu::dot(xt + g * gs, d.data(), gs);
            err += e * e;
          }
          err /= static_cast<double>(tok.size());
          if (err < min_err) {
            min_err = err;
            best_max = m;
          }
        }
        best[static_cast<size_t>(r * G + g)] = best_max;
      }
    }
  });
  return best;
}

void apply_clip(LinearF32& L, const std::vector<float>& max_val, int group_size) {
  const int64_t G = L.in / group_size;
  for (int64_t r = 0; r < L.out; ++r)
    for (int64_t c = 0; c < L.in; ++c) {
      const float m = max_val[static_cast<size_t>(r * G + c / group_size)];
      float& w = L.w[static_cast<size_t>(r * L.in + c)];
      w = std::clamp(w, -m, m);
    }
}

// ---------------------------------------------------------------------------------------------

void awq_layer(DecoderLayerF32& L, LayerInputs& X, BlockRunner& runner, const AwqOptions& o,
               AwqLayerReport* report) {
  AwqLayerReport rep;
  auto quantizable = [&](const std::vector<LinearF32*>& ls) {
    for (const LinearF32* l : ls)
      if (can_quantize(*l, o)) return true;
    return false;
  };
  // w_mean over the group's linears (only used with duo scaling). Quantizable implies the shared
  // in_features is a multiple of the group size.
  auto wmean = [&](const std::vector<LinearF32*>& ls, size_t n) {
    if (!o.duo_scaling) return std::vector<float>(n, 1.0f);
    return weight_mean(std::vector<const LinearF32*>(ls.begin(), ls.end()), o.group_size);
  };
  std::vector<float> s1, s2, s3, s4;
  // Group 1: input_layernorm -> q, k, v; inspected block: self_attn.
  if (quantizable({&L.q, &L.k, &L.v})) {
    Matrix ref, out;
    runner.attention(L, L.q, L.k, L.v, ref);
    const std::vector<float> xm = activation_mean(X.attn);
    const std::vector<float> wm = wmean({&L.q, &L.k, &L.v}, xm.size());
    LinearF32 tq = L.q, tk = L.k, tv = L.v;
    auto loss = [&](const std::vector<float>& s) {
      tq.w = L.q.w;
      tk.w = L.k.w;
      tv.w = L.v.w;
      for (LinearF32* l : {&tq, &tk, &tv}) fake_quantize_scaled(*l, s, o);
      runner.attention(L, tq, tk, tv, out);
      return mse(ref, out);
    };
    s1 = search_scales(xm, wm, o, loss, &rep.best_ratio[0], &rep.best_loss[0]);
    rep.rtn_loss[0] = loss({});
  }
  // Group 2: v_proj -> o_proj, only without GQA (v_proj and o_proj of the same shape).
  if (L.v.out == L.o.out && L.v.in == L.o.in && quantizable({&L.o})) {
    Matrix ref, out;
    matmul_wt(X.o, L.o, ref, o.pool);
    const std::vector<float> xm = activation_mean(X.o);
    const std::vector<float> wm = wmean({&L.o}, xm.size());
    LinearF32 T = L.o;
    auto loss = [&](const std::vector<float>& s) {
      T.w = L.o.w;
      fake_quantize_scaled(T, s, o);
      matmul_wt(X.o, T, out, o.pool);
      return mse(ref, out);
    };
    s2 = search_scales(xm, wm, o, loss, &rep.best_ratio[1], &rep.best_loss[1]);
    rep.rtn_loss[1] = loss({});
  }
  // Group 3: post_attention_layernorm -> gate, up; inspected block: mlp.
  if (quantizable({&L.gate, &L.up})) {
    Matrix ref, out;
    runner.mlp(L, L.gate, L.up, ref);
    const std::vector<float> xm = activation_mean(X.mlp);
    const std::vector<float> wm = wmean({&L.gate, &L.up}, xm.size());
    LinearF32 tg = L.gate, tu = L.up;
    auto loss = [&](const std::vector<float>& s) {
      tg.w = L.gate.w;
      tu.w = L.up.w;
      for (LinearF32* l : {&tg, &tu}) fake_quantize_scaled(*l, s, o);
      runner.mlp(L, tg, tu, out);
      return mse(ref, out);
    };
    s3 = search_scales(xm, wm, o, loss, &rep.best_ratio[2], &rep.best_loss[2]);
    rep.rtn_loss[2] = loss({});
  }
  // Group 4: up_proj -> down_proj.
  if (quantizable({&L.down})) {
    Matrix ref, out;
    matmul_wt(X.down, L.down, ref, o.pool);
    const std::vector<float> xm = activation_mean(X.down);
    const std::vector<float> wm = wmean({&L.down}, xm.size());
    LinearF32 T = L.down;
    auto loss = [&](const std::vector<float>& s) {
      T.w = L.down.w;
      fake_quantize_scaled(T, s, o);
      matmul_wt(X.down, T, out, o.pool);
      return mse(ref, out);
    };
    s4 = search_scales(xm, wm, o, loss, &rep.best_ratio[3], &rep.best_loss[3]);
    rep.rtn_loss[3] = loss({});
  }

  // Fold all four (§1.6) and scale the cached inputs for the clip search.
  if (!s1.empty()) {
    apply_scales(s1, &L.attn_norm, nullptr, {&L.q, &L.k, &L.v});
    divide_columns(X.attn, s1);
  }
  if (!s2.empty()) {
    apply_scales(s2, nullptr, &L.v, {&L.o});
    divide_columns(X.o, s2);
  }
  if (!s3.empty()) {
    apply_scales(s3, &L.ffn_norm, nullptr, {&L.gate, &L.up});
    divide_columns(X.mlp, s3);
  }
  if (!s4.empty()) {
    apply_scales(s4, nullptr, &L.up, {&L.down});
    divide_columns(X.down, s4);
  }

  // Clip search (§1.7) on the scaled weights and inputs; q/k are excluded.
  if (o.clip) {
    const std::pair<LinearF32*, const Matrix*> targets[] = {
        {&L.q, &X.attn},   {&L.k, &X.attn}, {&L.v, &X.attn},   {&L.o, &X.o},
        {&L.gate, &X.mlp}, {&L.up, &X.mlp}, {&L.down, &X.down}};
    for (const auto& [lin, x] : targets) {
      if (!can_quantize(*lin, o) || clip_excluded(lin->name)) continue;
      apply_clip(*lin, search_clip(*lin, *x, o), o.group_size);
    }
  }
  if (report) *report = rep;
}

}  // namespace perfx::quant
