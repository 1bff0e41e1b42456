// Perplexity as llama.cpp's `llama-perplexity` defines it (tools/perplexity/perplexity.cpp,
// perplexity()): the text's tokens are cut into non-overlapping windows of n_ctx tokens; the first
// token of each window is replaced by BOS when the tokenizer adds one; each window is evaluated
// from an empty cache and only the second half is scored: the tokens at positions
// n_ctx/2 + 1 … n_ctx − 1 of the window, each predicted from everything before it in the window.
// PPL = exp(mean NLL); the ± is ppl · sqrt(var(NLL) / (count − 1)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace perfx {
class Engine;
}

namespace perfx::quant {

struct PerplexityResult {
  int n_chunks = 0;
  int64_t n_scored = 0;  // tokens scored
  double mean_nll = 0;   // nats
  double ppl = 0;
  double ppl_error = 0;  // one standard error of the estimate
};

/// Accumulates per-token NLLs (the scoring half of a window) into the llama.cpp statistics.
class NllAccumulator {
 public:
  /// logits [n, vocab] rows predicting targets[0..n); adds −log softmax(row)[target] for each.
  void add_rows(const float* logits, int64_t vocab, const int32_t* targets, int64_t n);
  void add(double nll);
  PerplexityResult result() const;
  int64_t count() const { return count_; }

 private:
  double sum_ = 0, sum2_ = 0;
  int64_t count_ = 0;
};

/// −log softmax(logits)[target] in double precision (max-subtracted). Throws perfx::Error when the
/// result is not finite (a NaN or inf logit in the row, or a row of -inf).
double token_nll(const float* logits, int64_t vocab, int32_t target);

/// Throws perfx::Error unless a text of `n_ids` tokens is long enough for perplexity with windows
/// of `n_ctx` tokens: at least 2·n_ctx (llama.cpp's requirement); the message says what to change.
void check_perplexity_tokens(size_t n_ids, int n_ctx);

/// Evaluates the perplexity of `ids` (the tokenized text, with its BOS) on `engine`.
/// bos < 0: no BOS substitution. max_chunks <= 0: all windows. on_chunk(i, n, running) is called
/// after each window. Throws perfx::Error when n_ctx < 4, the text has fewer than 2·n_ctx tokens
/// (llama.cpp's requirement), or n_ctx exceeds the engine's context.
PerplexityResult evaluate_perplexity(
    Engine& engine, const std::vector<int32_t>& ids, int n_ctx, int32_t bos, int max_chunks,
    const std::function<void(int, int, const PerplexityResult&)>& on_chunk = {});

}  // namespace perfx::quant
