#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "perfx/sampling.h"

#include "backend/backend.h"
#include "backend/cpu/sampling.h"

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
  record(id, true);
}

void Sampler::accept_prompt(int32_t id) {
  record(id, false);
}

void Sampler::record(int32_t id, bool generated) {
  if (p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f)
    return;  // no penalty reads the history
  window_.emplace_back(id, generated);
  counts_[id]++;
  if (generated) out_counts_[id]++;
  if (p_.repeat_last_n >= 0) {
    while ((int)window_.size() > p_.repeat_last_n) {
      const auto [old, gen] = window_.front();
      window_.pop_front();
      if (--counts_[old] == 0) counts_.erase(old);
      if (gen && --out_counts_[old] == 0) out_counts_.erase(old);
    }
  }
}

void Sampler::fill_row(SampleRow& r) {
  r.temperature = p_.temperature;
  r.top_k = p_.top_k;
  r.top_p = p_.top_p;
  r.min_p = p_.min_p;
  r.repeat_penalty = p_.repeat_penalty;
  r.presence_penalty = p_.presence_penalty;
  r.frequency_penalty = p_.frequency_penalty;
  r.repeat_ids.clear();
  r.counts.clear();
  // Repetition over prompt + output in the window, presence / frequency over the generated tokens.
  if (p_.repeat_penalty != 1.0f)
    for (const auto& kv : counts_) r.repeat_ids.push_back(kv.first);
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
    for (const auto& kv : out_counts_) r.counts.emplace_back(kv.first, kv.second);
  // One draw per sampled token, none when greedy (as the sampler always drew).
  r.u = p_.temperature > 0.0f ? uniform() : 0.0;
}

int32_t Sampler::sample(float* logits, int n_vocab) {
  SampleRow r;
  fill_row(r);
  return cpu::sample_logits(logits, n_vocab, r, scratch_);
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
