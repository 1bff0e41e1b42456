#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace perfx {

RopeParams make_rope_params(const ModelConfig& cfg, int64_t seq_len) {
  RopeParams p;
  p.head_dim = (int)cfg.head_dim;
  p.rot_dim = (int)(cfg.head_dim * cfg.partial_rotary_factor);
  p.rot_dim -= p.rot_dim % 2;
  p.interleaved = cfg.rope_interleaved;
  const int d = p.rot_dim, half = d / 2;
  const auto& rs = cfg.rope_scaling;
  double base = cfg.rope_theta;
  if (rs.type == RopeScaling::Type::Dynamic && seq_len > cfg.max_position_embeddings) {
    // base' = base · ((F·L/M) − (F−1))^(d/(d−2))
    const double F = rs.factor, L = (double)seq_len, M = (double)cfg.max_position_embeddings;
    base = base * std::pow(F * L / M - (F - 1.0), (double)d / (d - 2.0));
  }
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) {
    // HF: 1 / base ** (arange(0, d, 2).float() / d), in fp32
    const float expo = (float)(2 * i) / (float)d;
    inv[i] = 1.0 / std::pow(base, (double)expo);
  }
  switch (rs.type) {
    case RopeScaling::Type::Linear:
      for (auto& f : inv) f /= rs.factor;
      break;
    case RopeScaling::Type::Llama3: {
      const double F = rs.factor, lo = rs.low_freq_factor, hi = rs.high_freq_factor;
      const double orig = (double)rs.original_max_position_embeddings;
      const double low_wl = orig / lo, high_wl = orig / hi;
      for (auto& f : inv) {
        const double wl = 2.0 * M_PI / f;
        if (wl < high_wl) continue;
        if (wl > low_wl) {
          f = f / F;
        } else {
          const double sm = (orig / wl - lo) / (hi - lo);
          f = (1.0 - sm) * f / F + sm * f;
        }
      }
      break;
    }
    case RopeScaling::Type::Yarn: {
      const double F = rs.factor, b = cfg.rope_theta;
      const double M = rs.original_max_position_embeddings > 0 ? (double)rs.original_max_position_embeddings
                                                               : (double)cfg.max_position_embeddings;
      auto dim_of = [&](double r) { return d * std::log(M / (2 * M_PI * r)) / (2 * std::log(b)); };
      double low = std::floor(dim_of(rs.beta_fast)), high = std::ceil(dim_of(rs.beta_slow));
      low = std::max(low, 0.0);
      high = std::min(high, (double)d - 1);
      if (low == high) high += 0.001;
      for (int i = 0; i < half; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrap = 1.0 - ramp;
        inv[i] = (inv[i] / F) * (1.0 - extrap) + inv[i] * extrap;
      }
      p.attention_factor = rs.attention_factor;
      break;
    }
    default:
      break;
  }
  p.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) p.inv_freq[i] = (float)inv[i];
  return p;
}

}  // namespace perfx
