#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "perfx/sampling.h"

namespace perfx {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

void SamplingParams::validate() const {
  auto fail = [](const char* field, const std::string& reason, const std::string& got) {
    throw InvalidSamplingParam(field, reason + ", got " + got);
  };
  if (!(temperature >= 0) || !std::isfinite(temperature))
    fail("temperature", "must be >= 0 (0 = greedy)", number(temperature));
  if (top_k < -1) fail("top_k", "must be >= -1 (0 or -1 = off)", std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1)) fail("top_p", "must be in (0, 1] (1 = off)", number(top_p));
  if (!(min_p >= 0 && min_p <= 1)) fail("min_p", "must be in [0, 1] (0 = off)", number(min_p));
  if (!(repeat_penalty > 0) || !std::isfinite(repeat_penalty))
    fail("repeat_penalty", "must be > 0 (1 = off)", number(repeat_penalty));
  if (repeat_last_n < -1)
    fail("repeat_last_n", "must be >= -1 (-1 = whole history)", std::to_string(repeat_last_n));
  if (!std::isfinite(presence_penalty))
    fail("presence_penalty", "must be a finite number", number(presence_penalty));
  if (!std::isfinite(frequency_penalty))
    fail("frequency_penalty", "must be a finite number", number(frequency_penalty));
}

Sampler::Sampler(const SamplingParams& p) : p_(p) {
  // splitmix64 of the seed gives a non-zero xorshift state
  uint64_t z = p.seed + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  state_ = (z ^ (z >> 31)) | 1;
}

double Sampler::uniform() {
  // xorshift64*
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const uint64_t r = state_ * 2685821657736338717ull;
  return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::accept(int32_t id) {
  window_.push_back(id);
  counts_[id]++;
  if (p_.repeat_last_n >= 0) {
    while ((int)window_.size() > p_.repeat_last_n) {
      const int32_t old = window_.front();
      window_.pop_front();
      if (--counts_[old] == 0) counts_.erase(old);
    }
  }
}

int32_t Sampler::sample(float* logits, int n_vocab) {
  // 1. penalties over the recent window
  if (p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (const auto& [id, cnt] : counts_) {
      if (id < 0 || id >= n_vocab) continue;
      float& l = logits[id];
      if (p_.repeat_penalty != 1.0f) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      l -= p_.presence_penalty + p_.frequency_penalty * (float)cnt;
    }
  }
  // 2. greedy
  if (p_.temperature <= 0.0f) {
    int32_t best = 0;
    for (int i = 1; i < n_vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  // 3. top-k (sorted candidates, descending)
  int k = (p_.top_k > 0 && p_.top_k < n_vocab) ? p_.top_k : n_vocab;
  if (k == n_vocab && p_.top_p >= 1.0f && p_.min_p <= 0.0f) {
    // No truncation at all: draw from softmax(logits / T) in O(vocab), without sorting.
    float mx = logits[0];
    for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double total = 0;
    for (int i = 0; i < n_vocab; ++i) total += std::exp((double)(logits[i] - mx) / p_.temperature);
    double r = uniform() * total;
    for (int i = 0; i < n_vocab; ++i) {
      r -= std::exp((double)(logits[i] - mx) / p_.temperature);
      if (r < 0) return i;
    }
    return n_vocab - 1;
  }
  auto& c = scratch_;
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
    e.first = std::exp((e.first - mx) / p_.temperature);
    sum += e.first;
  }
  for (auto& e : c) e.first = (float)(e.first / sum);
  // 5. top-p: smallest prefix with mass >= top_p
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].first;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }
  // 6. min-p: keep p >= min_p * p_max
  if (p_.min_p > 0.0f) {
    const float thr = p_.min_p * c[0].first;
    size_t keep = 1;
    while (keep < c.size() && c[keep].first >= thr) ++keep;
    c.resize(keep);
  }
  // 7. draw
  double total = 0;
  for (auto& e : c) total += e.first;
  double r = uniform() * total;
  for (auto& e : c) {
    r -= e.first;
    if (r < 0) return e.second;
  }
  return c.back().second;
}

static double log_sum_exp(const float* logits, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp((double)logits[i] - mx);
  return mx + std::log(s);
}

float token_logprob(const float* logits, int n_vocab, int32_t id) {
  return (float)((double)logits[id] - log_sum_exp(logits, n_vocab));
}

std::vector<TokenLogprob> top_logprobs(const float* logits, int n_vocab, int k) {
  k = std::clamp(k, 0, n_vocab);
  const double lse = log_sum_exp(logits, n_vocab);
  std::vector<int32_t> idx(n_vocab);
  for (int i = 0; i < n_vocab; ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenLogprob> out;
  for (int i = 0; i < k; ++i) out.push_back({idx[i], (float)((double)logits[idx[i]] - lse)});
  return out;
}

}  // namespace perfx
