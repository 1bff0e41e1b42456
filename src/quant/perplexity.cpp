// llama.cpp-compatible perplexity over non-overlapping windows, second half scored.
#include "quant/perplexity.h"

#include <algorithm>
#include <cmath>

#include "perfx/engine.h"
#include "perfx/status.h"

namespace perfx::quant {

double token_nll(const float* logits, int64_t vocab, int32_t target) {
  check(target >= 0 && target < vocab, "perplexity: token id out of range");
  float mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double nll = std::log(sum) - (static_cast<double>(logits[target]) - mx);
  // NaN or inf anywhere in the row makes it NaN (exp(inf - inf), or the NaN itself); so would a
  // row of -inf. A "PPL = nan" would hide the cause.
  check(std::isfinite(nll),
        "perplexity: the model's logits are not finite (NaN or inf): its weights are corrupt or "
        "its activations overflowed");
  return nll;
}

void NllAccumulator::add(double nll) {
  sum_ += nll;
  sum2_ += nll * nll;
  ++count_;
}

void NllAccumulator::add_rows(const float* logits, int64_t vocab, const int32_t* targets,
                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) add(token_nll(logits + i * vocab, vocab, targets[i]));
}

PerplexityResult NllAccumulator::result() const {
  PerplexityResult r;
  r.n_scored = count_;
  if (count_ == 0) return r;
  const double mean = sum_ / static_cast<double>(count_);
  r.mean_nll = mean;
  r.ppl = std::exp(mean);
  const double var = sum2_ / static_cast<double>(count_) - mean * mean;
  if (var > 0 && count_ > 1) r.ppl_error = std::sqrt(var / static_cast<double>(count_ - 1)) * r.ppl;
  return r;
}

void check_perplexity_tokens(size_t n_ids, int n_ctx) {
  check(static_cast<int64_t>(n_ids) >= 2 * static_cast<int64_t>(n_ctx),
        "the text has " + std::to_string(n_ids) + (n_ids == 1 ? " token" : " tokens") +
            "; perplexity with -c " + std::to_string(n_ctx) + " needs at least 2 x " +
            std::to_string(n_ctx) + " = " + std::to_string(2 * n_ctx) +
            " (give a longer text or a smaller -c)");
}

PerplexityResult evaluate_perplexity(
    Engine& engine, const std::vector<int32_t>& ids, int n_ctx, int32_t bos, int max_chunks,
    const std::function<void(int, int, const PerplexityResult&)>& on_chunk) {
  check(n_ctx >= 4, "-c must be at least 4, got " + std::to_string(n_ctx));
  check(n_ctx <= engine.ctx(), "-c " + std::to_string(n_ctx) + " exceeds the engine context " +
                                   std::to_string(engine.ctx()));
  check_perplexity_tokens(ids.size(), n_ctx);
  int n_chunks = static_cast<int>(ids.size() / static_cast<size_t>(n_ctx));
  if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
  const int first = n_ctx / 2;
  NllAccumulator acc;
  std::vector<float> logits;
  for (int c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> window(ids.begin() + static_cast<int64_t>(c) * n_ctx,
                                ids.begin() + static_cast<int64_t>(c + 1) * n_ctx);
    if (bos >= 0) window[0] = bos;
    engine.prompt_logits(window, logits);
    const int64_t v = static_cast<int64_t>(logits.size()) / n_ctx;
    check(v > 0 && v * n_ctx == static_cast<int64_t>(logits.size()),
          "perplexity: unexpected logits size");
    // Rows first .. n_ctx−2 predict the window's tokens first+1 .. n_ctx−1 (the original ids).
    acc.add_rows(logits.data() + static_cast<int64_t>(first) * v, v,
                 ids.data() + static_cast<int64_t>(c) * n_ctx + first + 1, n_ctx - 1 - first);
    PerplexityResult r = acc.result();
    r.n_chunks = c + 1;
    if (on_chunk) on_chunk(c + 1, n_chunks, r);
  }
  PerplexityResult r = acc.result();
  r.n_chunks = n_chunks;
  return r;
}

}  // namespace perfx::quant
