// Engine::generate on stories260K (issue 8): the text continues the prompt (its leading space
// kept), and the penalties cover what they do in the server (repetition: prompt + output;
// presence / frequency: output only).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "perfx/engine.h"
#include "perfx/status.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

std::unique_ptr<Engine> stories() {
  EngineOptions eo;
  eo.model_path = shared_path("models/stories260K-hf");
  eo.n_threads = 2;
  return Engine::load(eo);
}

Engine::GenerateResult greedy(Engine& e, const std::string& prompt, int n,
                              void (*tweak)(SamplingParams&) = nullptr) {
  Engine::GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  if (tweak) tweak(o.sampling);
  return e.generate(encode_prompt(e.tokenizer(), prompt), o, nullptr);
}

TEST(GenerateText, ContinuationKeepsItsLeadingSpace) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = stories();
  EXPECT_EQ(greedy(*e, "Once upon a time,", 8).text, " there was a little girl named");
  // After the BOS alone the text starts the sequence (golden_greedy_n256.txt starts "Once").
  EXPECT_EQ(greedy(*e, "", 2).text, "Once upon");
}

// A prompt as long as the context fits in it but leaves no room for a token: the error says so
// (it used to say the prompt "does not fit the context size", which it did).
TEST(GenerateText, PromptAsLongAsTheContextSaysThereIsNoRoomToGenerate) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  EngineOptions eo;
  eo.model_path = shared_path("models/stories260K-hf");
  eo.n_threads = 2;
  eo.ctx = 4;
  auto e = Engine::load(eo);
  std::vector<int32_t> prompt = encode_prompt(e->tokenizer(), "Once upon a time");
  prompt.resize(4, prompt.back());
  Engine::GenerateOptions o;
  o.max_tokens = 2;
  try {
    e->generate(prompt, o, nullptr);
    FAIL() << "a prompt of ctx tokens was accepted";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("prompt has 4 tokens, which leaves no room to generate in the context size 4"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("shorten it, or raise -c / --ctx-size"), std::string::npos) << m;  // the fix
  }
}

// context_full says that the context, not max_tokens, EOS, a stop string or on_text, ended a
// "length" generation (perfx run prints a note then; it used to end without a word).
TEST(GenerateText, ContextFullOnlyWhenTheContextEndedIt) {
  EngineOptions eo;
  eo.model_path = source_dir() + "/models/default";
  eo.n_threads = 2;
  eo.ctx = 16;
  auto e = Engine::load(eo);
  const std::vector<int32_t> prompt = encode_prompt(e->tokenizer(), "In the beginning");
  ASSERT_LT(prompt.size(), 10u);
  const int room = 16 - (int)prompt.size();
  auto gen = [&](int max_tokens, std::function<bool(const std::string&)> on_text = nullptr) {
    Engine::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0;
    o.ignore_eos = true;
    return e->generate(prompt, o, on_text);
  };
  const auto full = gen(64);
  EXPECT_EQ(full.finish_reason, "length");
  EXPECT_EQ((int)full.output_ids.size(), room);
  EXPECT_TRUE(full.context_full);
  const auto short_n = gen(4);
  EXPECT_EQ(short_n.finish_reason, "length");
  EXPECT_EQ(short_n.output_ids.size(), 4u);
  EXPECT_FALSE(short_n.context_full);
  const auto exact = gen(room);  // max_tokens fills the context: max_tokens ended it
  EXPECT_EQ((int)exact.output_ids.size(), room);
  EXPECT_FALSE(exact.context_full);
  const auto cancelled = gen(64, [](const std::string&) { return false; });
  EXPECT_EQ(cancelled.finish_reason, "length");
  EXPECT_LT((int)cancelled.output_ids.size(), room);
  EXPECT_FALSE(cancelled.context_full);
}

TEST(GenerateText, PresenceAndFrequencyPenaltiesIgnoreThePrompt) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = stories();
  const std::string prompt = "Once upon a time, there was a girl. Once upon a time,";
  const std::vector<int32_t> ids = encode_prompt(e->tokenizer(), prompt);
  const auto plain = greedy(*e, prompt, 1);
  ASSERT_EQ(plain.output_ids.size(), 1u);
  // The greedy token (" there") is in the prompt, so counting the prompt would change it.
  ASSERT_NE(std::find(ids.begin(), ids.end(), plain.output_ids[0]), ids.end());
  // 10: large enough that counting the prompt's " there" would change the pick.
  const auto presence = greedy(*e, prompt, 1, [](SamplingParams& p) { p.presence_penalty = 10; });
  const auto frequency = greedy(*e, prompt, 1, [](SamplingParams& p) { p.frequency_penalty = 10; });
  EXPECT_EQ(presence.output_ids, plain.output_ids);
  EXPECT_EQ(frequency.output_ids, plain.output_ids);
  // The repetition penalty does count the prompt.
  const auto rep = greedy(*e, prompt, 1, [](SamplingParams& p) { p.repeat_penalty = 3; });
  EXPECT_NE(rep.output_ids, plain.output_ids);
}

}  // namespace
}  // namespace perfx::test
