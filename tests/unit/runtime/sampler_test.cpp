#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "perfx/sampling.h"
#include "runtime/stop_strings.h"

using namespace perfx;

namespace {
std::vector<float> logits5() { return {1.0f, 3.0f, 2.0f, 0.5f, 2.9f}; }
}  // namespace

// validate() throws InvalidSamplingParam naming the field (and the value) at fault.
std::string invalid_field(const SamplingParams& p, std::string* what = nullptr) {
  try {
    p.validate();
  } catch (const InvalidSamplingParam& e) {
    if (what) *what = e.what();
    EXPECT_EQ(std::string(e.what()), e.field() + " " + e.reason());
    return e.field();
  }
  return "";
}

TEST(SamplingParams, ValidateNamesTheFieldOutOfRange) {
  EXPECT_EQ(invalid_field(SamplingParams{}), "");
  SamplingParams off;
  off.temperature = 0;
  off.top_k = 0;
  off.top_p = 1;
  off.min_p = 0;
  off.repeat_last_n = -1;
  off.presence_penalty = -2;
  EXPECT_EQ(invalid_field(off), "");
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return invalid_field(p);
  };
  EXPECT_EQ(with([](SamplingParams& p) { p.temperature = -0.5f; }), "temperature");
  EXPECT_EQ(with([](SamplingParams& p) { p.temperature = NAN; }), "temperature");
  EXPECT_EQ(with([](SamplingParams& p) { p.top_k = -3; }), "top_k");
  EXPECT_EQ(with([](SamplingParams& p) { p.top_k = -1; }), "") << "-1 = off (vLLM, llama.cpp)";
  EXPECT_EQ(with([](SamplingParams& p) { p.top_p = 0; }), "top_p");
  EXPECT_EQ(with([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p");
  EXPECT_EQ(with([](SamplingParams& p) { p.min_p = -0.1f; }), "min_p");
  EXPECT_EQ(with([](SamplingParams& p) { p.min_p = 2; }), "min_p");
  EXPECT_EQ(with([](SamplingParams& p) { p.repeat_penalty = 0; }), "repeat_penalty");
  EXPECT_EQ(with([](SamplingParams& p) { p.repeat_last_n = -2; }), "repeat_last_n");
  EXPECT_EQ(with([](SamplingParams& p) { p.frequency_penalty = INFINITY; }), "frequency_penalty");
  SamplingParams k;
  k.top_k = -3;
  std::string what;
  invalid_field(k, &what);
  EXPECT_EQ(what, "top_k must be >= -1 (0 or -1 = off), got -3");
  EXPECT_THROW(k.validate(), Error);
}

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  auto l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 1);
}

// NaN logits (corrupt weights) made greedy pick token 0 and the draw fall off the end, silently:
// "run" printed nothing or "######" with exit 0. Now an error names it; -inf (masked) stays fine.
TEST(Sampler, NonFiniteLogitsAreAnError) {
  const float nan = std::nanf(""), inf = INFINITY;
  for (float temp : {0.0f, 0.8f}) {
    SamplingParams p;
    p.temperature = temp;
    for (const std::vector<float>& row :
         {std::vector<float>{0.1f, nan, 0.3f}, std::vector<float>{nan, nan, nan},
          std::vector<float>{0.1f, 0.2f, inf}}) {
      Sampler s(p);
      std::vector<float> l = row;
      try {
        s.sample(l.data(), (int)l.size());
        ADD_FAILURE() << "a row with " << (std::isnan(row[1]) ? "NaN" : "inf") << " was sampled";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("logits are not finite"), std::string::npos)
            << e.what();
      }
    }
    Sampler s(p);
    std::vector<float> masked = {-inf, 0.5f, -inf};
    EXPECT_EQ(s.sample(masked.data(), 3), 1);
  }
  // A request's own extreme penalty may overflow a logit to inf: not the model's fault, no error
  // (checked before the penalties; an error there would fail every request of the step).
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 1e-30f;
  Sampler s(p);
  s.accept(2);
  std::vector<float> l = {0.1f, 0.2f, 1e10f};
  EXPECT_EQ(s.sample(l.data(), 3), 2);
  // Drawn with a temperature the overflowed logit stays finite (the largest float), so the draw
  // takes it: as +inf the softmax was NaN and the draw fell off the end to the last id (2 here).
  for (float big : {1e10f, 1e38f}) {
    SamplingParams pt;
    pt.temperature = 0.8f;
    pt.repeat_penalty = 1e-30f;
    pt.frequency_penalty = big == 1e38f ? -1e38f : 0.0f;  // −(−1e38 · 2) overflows as well
    Sampler st(pt);
    st.accept(1);
    st.accept(1);
    std::vector<float> lt = {0.1f, big, 0.2f};
    EXPECT_EQ(st.sample(lt.data(), 3), 1) << big;
  }
}

TEST(Sampler, RepeatPenaltyChangesGreedyChoice) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 1.1f;  // 3.0/1.1 = 2.73 < 2.9
  Sampler s(p);
  s.accept(1);
  auto l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 4);
}

TEST(Sampler, FrequencyAndPresencePenalties) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 1.0f;
  p.frequency_penalty = 0.05f;
  p.presence_penalty = 0.0f;
  Sampler s(p);
  s.accept(1);
  s.accept(1);  // 3.0 - 0.1 = 2.9 ties 2.9 -> lower id wins
  auto l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 1);
  s.accept(1);  // 3.0 - 0.15 < 2.9
  l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 4);
}

// Issue 8: what each penalty covers. logits5() = {1.0, 3.0, 2.0, 0.5, 2.9}: greedy picks 1, then 4.

// Repetition penalty (llama.cpp --repeat-penalty, vLLM repetition_penalty): prompt + output.
TEST(Sampler, RepetitionPenaltyCoversPromptTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 1.1f;
  Sampler s(p);
  s.accept_prompt(1);  // 3.0 / 1.1 = 2.73 < 2.9
  auto l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 4);
  // Within the window only: 64 later tokens push the prompt token out.
  for (int i = 0; i < 64; ++i) s.accept(3);
  l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 1);
}

// Presence penalty (OpenAI): generated tokens only.
TEST(Sampler, PresencePenaltyIgnoresPromptTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.2f;
  Sampler s(p);
  for (int i = 0; i < 5; ++i) s.accept_prompt(1);
  auto l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 1);
  s.accept(1);  // 3.0 - 0.2 < 2.9, once, however often
  l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 4);
}

// Frequency penalty (OpenAI): generated tokens only, per occurrence.
TEST(Sampler, FrequencyPenaltyIgnoresPromptTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.06f;
  Sampler s(p);
  for (int i = 0; i < 5; ++i) s.accept_prompt(1);
  auto l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 1);
  s.accept(1);  // 3.0 - 0.06 > 2.9
  l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 1);
  s.accept(1);  // 3.0 - 0.12 < 2.9
  l = logits5();
  EXPECT_EQ(s.sample(l.data(), 5), 4);
}

TEST(Sampler, SameSeedSameSequence) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  int diff = 0;
  for (int i = 0; i < 200; ++i) {
    auto l1 = logits5(), l2 = logits5(), l3 = logits5();
    const int x = a.sample(l1.data(), 5), y = b.sample(l2.data(), 5), z = c.sample(l3.data(), 5);
    EXPECT_EQ(x, y);
    diff += x != z;
  }
  EXPECT_GT(diff, 0);
}

TEST(Sampler, DistributionFollowsSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 1;
  Sampler s(p);
  std::map<int, int> hist;
  const int N = 40000;
  for (int i = 0; i < N; ++i) {
    auto l = logits5();
    hist[s.sample(l.data(), 5)]++;
  }
  auto l = logits5();
  double z = 0;
  for (float x : l) z += std::exp(x);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(hist[i] / (double)N, std::exp(l[i]) / z, 0.01) << i;
}

TEST(Sampler, TopKTopPMinPTruncate) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 3;
  p.top_k = 2;  // only ids 1 and 4
  p.top_p = 1.0f;
  p.min_p = 0;
  Sampler k(p);
  for (int i = 0; i < 500; ++i) {
    auto l = logits5();
    const int t = k.sample(l.data(), 5);
    EXPECT_TRUE(t == 1 || t == 4);
  }
  p.top_k = 0;
  p.top_p = 0.3f;  // p(1) ≈ 0.36 alone covers 0.3
  Sampler tp(p);
  for (int i = 0; i < 200; ++i) {
    auto l = logits5();
    EXPECT_EQ(tp.sample(l.data(), 5), 1);
  }
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // keeps p >= 0.5 p_max: ids 1 (1.0), 4 (0.905), 2 (0.37 -> dropped)
  Sampler mp(p);
  for (int i = 0; i < 500; ++i) {
    auto l = logits5();
    const int t = mp.sample(l.data(), 5);
    EXPECT_TRUE(t == 1 || t == 4);
  }
}

TEST(Sampler, Logprobs) {
  auto l = logits5();
  double z = 0;
  for (float x : l) z += std::exp(x);
  EXPECT_NEAR(token_logprob(l.data(), 5, 2), 2.0 - std::log(z), 1e-5);
  auto top = top_logprobs(l.data(), 5, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 4);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(z), 1e-5);
}

TEST(StopMatcher, HoldsBackPartialStopAndCuts) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("hello E"), "hello ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X more"), "ENX more");
  EXPECT_EQ(m.push(" stuff EN"), " stuff ");
  EXPECT_EQ(m.push("D tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("ignored"), "");
  StopMatcher n({"\n\n"});
  EXPECT_EQ(n.push("a\n"), "a");
  EXPECT_EQ(n.flush(), "\n");
}
