#include "backend/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "perfx/status.h"

namespace perfx::cpu {

int32_t sample_logits(float* logits, int n_vocab, const SampleRow& p,
                      std::vector<std::pair<float, int32_t>>& scratch) {
  // 0. the model's output: a NaN or +inf logit (corrupt weights, an overflow) would pick a token
  // silently (greedy argmax skips NaN, the softmax of +inf is NaN). -inf is a masked token and
  // stays allowed. Checked before the penalties, so that a request's own extreme penalty (which may
  // overflow a logit to inf, as before) is not reported as a broken model.
  for (int i = 0; i < n_vocab; ++i)
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity())
      throw Error("the model's logits are not finite (" +
                  std::string(std::isnan(logits[i]) ? "NaN" : "inf") + " at token id " +
                  std::to_string(i) + "): its weights are corrupt or its activations overflowed");
  // 1. penalties. A request's own extreme penalty (repeat_penalty 1e-30 on a positive logit) may
  // overflow a finite logit: it stays the largest float instead of +inf, so that the softmax
  // below stays finite (exp(inf − inf) is NaN) and the penalized token is drawn as its weight says.
  constexpr float kMax = std::numeric_limits<float>::max();
  if (p.repeat_penalty != 1.0f)
    for (int32_t id : p.repeat_ids) {
      if (id < 0 || id >= n_vocab) continue;
      float& l = logits[id];
      l = std::min(l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty, kMax);
    }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    for (const auto& [id, cnt] : p.counts) {
      if (id < 0 || id >= n_vocab) continue;
      logits[id] =
          std::min(logits[id] - (p.presence_penalty + p.frequency_penalty * (float)cnt), kMax);
    }
  // 2. greedy
  if (p.temperature <= 0.0f) {
    int32_t best = 0;
    for (int i = 1; i < n_vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  // 3. top-k (sorted candidates, descending)
  const int k = (p.top_k > 0 && p.top_k < n_vocab) ? p.top_k : n_vocab;
  if (k == n_vocab && p.top_p >= 1.0f && p.min_p <= 0.0f) {
    // No truncation at all: draw from softmax(logits / T) in O(vocab), without sorting.
    float mx = logits[0];
    for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double total = 0;
    for (int i = 0; i < n_vocab; ++i) total += std::exp((double)(logits[i] - mx) / p.temperature);
    double r = p.u * total;
    for (int i = 0; i < n_vocab; ++i) {
      r -= std::exp((double)(logits[i] - mx) / p.temperature);
      if (r < 0) return i;
    }
    return n_vocab - 1;
  }
  auto& c = scratch;
  c.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) c[i] = {logits[i], i};
  auto cmp = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (k == n_vocab) {
    std::sort(c.begin(), c.end(), cmp);  // partial_sort degrades to a heap sort here
  } else {
    std::partial_sort(c.begin(), c.begin() + k, c.end(), cmp);
  }
  c.resize(k);
  // 4. temperature + softmax
  const float mx = c[0].first;
  double sum = 0;
  for (auto& e : c) {
    e.first = std::exp((e.first - mx) / p.temperature);
    sum += e.first;
  }
  for (auto& e : c) e.first = (float)(e.first / sum);
  // 5. top-p: smallest prefix with mass >= top_p
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].first;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }
  // 6. min-p: keep p >= min_p * p_max
  if (p.min_p > 0.0f) {
    const float thr = p.min_p * c[0].first;
    size_t keep = 1;
    while (keep < c.size() && c[keep].first >= thr) ++keep;
    c.resize(keep);
  }
  // 7. draw
  double total = 0;
  for (auto& e : c) total += e.first;
  double r = p.u * total;
  for (auto& e : c) {
    r -= e.first;
    if (r < 0) return e.second;
  }
  return c.back().second;
}

}  // namespace perfx::cpu
