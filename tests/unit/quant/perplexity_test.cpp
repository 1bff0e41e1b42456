// llama.cpp-style perplexity: the statistics and the window / BOS / second-half rules, on a fake
// Engine whose logits are known.
#include "quant/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "perfx/engine.h"
#include "perfx/status.h"

using namespace perfx;
using namespace perfx::quant;

namespace {

/// Logits: every row uniform except a bump of `bump` on token (first token of the row's window
/// + position) % vocab, so the NLL of each target is known in closed form. Records the windows.
class FakeEngine : public Engine {
 public:
  int vocab = 10, context = 8;
  float bump = 2.0f;
  std::vector<std::vector<int32_t>> windows;

  const ModelConfig& config() const override { throw Error("unused"); }
  const Tokenizer& tokenizer() const override { throw Error("unused"); }
  std::string device() const override { return "fake"; }
  int ctx() const override { return context; }
  size_t weight_bytes() const override { return 0; }
  std::string model_name() const override { return "fake"; }
  SeqId create_sequence() override { return ++next_; }
  void release_sequence(SeqId) override {}
  int seq_len(SeqId) const override { return 0; }
  int match_prefix(SeqId, const std::vector<int32_t>&) override { return 0; }
  int blocks_needed(SeqId, int) const override { return 0; }
  int free_blocks() const override { return 1; }
  int total_blocks() const override { return 1; }
  int block_size() const override { return 16; }
  bool allocate_slots(SeqId, int) override { return true; }
  void step(const std::vector<StepItem>& items, StepResult& out) override {
    const auto& w = items.at(0).tokens;
    EXPECT_TRUE(items[0].all_logits);
    EXPECT_TRUE(items[0].copy_logits);
    windows.push_back(w);
    out.logits.assign(w.size() * vocab, 0.0f);
    for (size_t p = 0; p < w.size(); ++p) out.logits[p * vocab + predicted(w, p)] = bump;
    out.tokens.assign(items.size(), -1);
  }
  GenerateResult generate(const std::vector<int32_t>&, const GenerateOptions&,
                          const std::function<bool(const std::string&)>&) override {
    throw Error("unused");
  }
  static int predicted(const std::vector<int32_t>& w, size_t p) {
    return static_cast<int>((w[0] + p) % 10);
  }

 private:
  SeqId next_ = 0;
};

}  // namespace

TEST(Perplexity, TokenNll) {
  const std::vector<float> uniform(7, 0.3f);
  EXPECT_NEAR(token_nll(uniform.data(), 7, 3), std::log(7.0), 1e-12);
  const std::vector<float> l = {1.0f, 2.0f, 3.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(token_nll(l.data(), 3, 0), std::log(z) - 1.0, 1e-9);
  const std::vector<float> big = {1000.0f, 0.0f};  // max-subtracted: no overflow
  EXPECT_NEAR(token_nll(big.data(), 2, 0), 0.0, 1e-9);
}

// Corrupt weights gave "PPL = nan" with exit 0; a non-finite logit anywhere in the row is an error.
TEST(Perplexity, NonFiniteLogitsAreAnError) {
  const float nan = std::nanf(""), inf = INFINITY;
  for (const std::vector<float>& row :
       {std::vector<float>{0.1f, nan, 0.3f}, std::vector<float>{nan, 0.2f, 0.3f},
        std::vector<float>{0.1f, inf, 0.3f}, std::vector<float>{-inf, -inf, -inf}}) {
    try {
      token_nll(row.data(), 3, 0);
      ADD_FAILURE() << "a non-finite row gave an NLL";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
    }
  }
}

TEST(Perplexity, StatisticsLikeLlamaCpp) {
  NllAccumulator acc;
  for (double v : {1.0, 2.0, 3.0, 4.0}) acc.add(v);
  const PerplexityResult r = acc.result();
  EXPECT_NEAR(r.mean_nll, 2.5, 1e-12);
  EXPECT_NEAR(r.ppl, std::exp(2.5), 1e-9);
  // var = E[x²] − E[x]² = 7.5 − 6.25 = 1.25; error = ppl · sqrt(var / (n − 1)).
  EXPECT_NEAR(r.ppl_error, std::exp(2.5) * std::sqrt(1.25 / 3), 1e-9);
}

TEST(Perplexity, WindowsBosAndSecondHalf) {
  FakeEngine e;
  std::vector<int32_t> ids;
  for (int i = 0; i < 27; ++i) ids.push_back((i * 7 + 3) % 10);  // 3 windows of 8, 3 left over
  const PerplexityResult r = evaluate_perplexity(e, ids, 8, /*bos=*/9, 0);
  ASSERT_EQ(e.windows.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(e.windows[c][0], 9);  // first token replaced by BOS
    for (int j = 1; j < 8; ++j) EXPECT_EQ(e.windows[c][j], ids[c * 8 + j]);
  }
  EXPECT_EQ(r.n_chunks, 3);
  EXPECT_EQ(r.n_scored, 3 * 3);  // positions 4, 5, 6 predict 5, 6, 7
  // Expected NLL per scored target.
  const double lz = std::log(9.0 + std::exp(2.0));
  double sum = 0;
  for (int c = 0; c < 3; ++c) {
    std::vector<int32_t> w(e.windows[c]);
    for (int p = 4; p < 7; ++p)
      sum += FakeEngine::predicted(w, p) == ids[c * 8 + p + 1] ? lz - 2.0 : lz;
  }
  EXPECT_NEAR(r.mean_nll, sum / 9, 1e-9);

  FakeEngine e2;
  const PerplexityResult r2 = evaluate_perplexity(e2, ids, 8, -1, 2);
  EXPECT_EQ(r2.n_chunks, 2);
  EXPECT_EQ(e2.windows[1][0], ids[8]);                           // no BOS substitution
  EXPECT_THROW(evaluate_perplexity(e2, ids, 16, -1, 0), Error);  // ctx > engine ctx
  e2.context = 16;
  try {  // < 2 * ctx tokens: the message says what to change
    evaluate_perplexity(e2, ids, 16, -1, 0);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(),
                 ("the text has " + std::to_string(ids.size()) +
                  " tokens; perplexity with -c 16 needs at least 2 x 16 = 32 (give a longer text "
                  "or a smaller -c)")
                     .c_str());
  }
}
