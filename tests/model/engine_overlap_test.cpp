// Overlapped decode (Engine::step_begin / step_end / step_cancel): the next step is queued, its
// tokens fed from this step's samples, before those reach the host. The tokens must be the plain
// steps' tokens, a generation that stops must leave its sequence as the plain path does (the step
// begun past the end cancelled), and the prefix cache must hold the sampled tokens, not the
// placeholders the queued steps were appended with. On the CPU (which samples ahead), f16-ref
// (which does not: the engine's fallback) and PERFX_TEST_DEVICE.
#include <gtest/gtest.h>

#include <cstdlib>

#include "model/model_test_util.h"
#include "perfx/engine.h"
#include "perfx/model_config.h"
#include "perfx/status.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

class EngineOverlap : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Engine> load(bool overlap = true) {
    std::string why;
    if (!device_available(GetParam(), &why)) return nullptr;
    EngineOptions eo;
    eo.model_path = shared_path("models/stories260K-hf");
    eo.n_threads = 2;
    eo.device = GetParam();
    eo.kv_cache_tokens = 4096;
    if (!overlap) setenv("PERFX_DECODE_OVERLAP", "0", 1);
    auto e = Engine::load(eo);
    unsetenv("PERFX_DECODE_OVERLAP");
    return e;
  }
};

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

SamplingParams plain_temperature() {
  SamplingParams p;
  p.temperature = 1.1f;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = 5;
  return p;
}

/// n decode steps after prompting each sequence with its prompt; overlapped or one step at a time.
std::vector<std::vector<int32_t>> decode(Engine& e,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         const SamplingParams& sp, int n, bool overlapped) {
  PromptedSequences b = start_sequences(e, prompts, sp);
  auto& items = b.items;
  const auto& seqs = b.seqs;
  std::vector<std::vector<int32_t>> out(prompts.size());
  Engine::StepResult r;
  if (!overlapped) {
    for (int s = 0; s < n; ++s) {
      e.step(items, r);
      for (size_t i = 0; i < items.size(); ++i) {
        out[i].push_back(r.tokens[i]);
        items[i].tokens = {r.tokens[i]};
      }
    }
  } else {
    e.step_begin(items);
    for (auto& it : items) {
      it.tokens.clear();
      it.token_from_sample = true;
    }
    for (int s = 0; s < n; ++s) {
      if (s + 1 < n) e.step_begin(items);
      EXPECT_EQ(e.steps_outstanding(), s + 1 < n ? 2 : 1);
      e.step_end(r);
      for (size_t i = 0; i < items.size(); ++i) out[i].push_back(r.tokens[i]);
    }
  }
  EXPECT_EQ(e.steps_outstanding(), 0);
  for (size_t i = 0; i < seqs.size(); ++i)
    EXPECT_EQ(e.seq_len(seqs[i]), (int)prompts[i].size() + n - 1) << "sequence " << i;
  b.release(e);
  return out;
}

TEST_P(EngineOverlap, OverlappedStepsGiveThePlainStepsTokens) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = load();
  if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  const std::vector<std::vector<int32_t>> one = {{1, 403, 407}},
                                          two = {{1, 403, 407}, {1, 300, 11, 90}};
  for (const auto& sp : {greedy(), plain_temperature()})
    for (const auto& prompts : {one, two}) {
      SCOPED_TRACE("temperature " + std::to_string(sp.temperature) + ", " +
                   std::to_string(prompts.size()) + " sequences");
      const auto plain = decode(*e, prompts, sp, 40, false);
      const auto over = decode(*e, prompts, sp, 40, true);
      EXPECT_EQ(over, plain);
    }
}

/// Runs `schedule` (steps, each a list of sequences: a sequence's first item is its prompt, the
/// others its last sampled token) over fresh sequences with these prompts: plainly (step(),
/// every token on the host) or overlapped (step k + 1 begun before step k ends; a sequence sampled
/// in step k is fed from the device). Returns each sequence's sampled tokens.
std::vector<std::vector<int32_t>> run_schedule(Engine& e,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const std::vector<std::vector<int>>& schedule,
                                               const SamplingParams& sp, bool overlapped) {
  const size_t n = prompts.size();
  std::vector<Sampler> samplers(n, Sampler(sp));
  std::vector<SeqId> seqs;
  for (size_t i = 0; i < n; ++i) seqs.push_back(e.create_sequence());
  std::vector<std::vector<int32_t>> out(n);
  std::vector<bool> prompted(n, false);
  std::vector<int> sampled_in(n, -1);  // the step whose sample is the sequence's newest token
  Engine::StepResult r;
  auto collect = [&](int k) {  // step k ended: its samples into out
    for (size_t j = 0; j < schedule[(size_t)k].size(); ++j)
      out[(size_t)schedule[(size_t)k][j]].push_back(r.tokens[j]);
  };
  for (size_t k = 0; k < schedule.size(); ++k) {
    std::vector<Engine::StepItem> items;
    for (int i : schedule[k]) {
      Engine::StepItem it;
      it.seq = seqs[(size_t)i];
      it.sampler = &samplers[(size_t)i];
      if (!prompted[(size_t)i]) {
        it.tokens = prompts[(size_t)i];
        prompted[(size_t)i] = true;
      } else if (overlapped && sampled_in[(size_t)i] == (int)k - 1) {
        it.token_from_sample = true;
      } else {
        it.tokens = {out[(size_t)i].back()};
      }
      sampled_in[(size_t)i] = (int)k;
      items.push_back(std::move(it));
    }
    if (!overlapped) {
      e.step(items, r);
      collect((int)k);
      continue;
    }
    e.step_begin(items);
    if (k > 0) {
      e.step_end(r);
      collect((int)k - 1);
    }
  }
  if (overlapped) {
    e.step_end(r);
    collect((int)schedule.size() - 1);
  }
  EXPECT_EQ(e.steps_outstanding(), 0);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(e.seq_len(seqs[i]), (int)(prompts[i].size() + out[i].size()) - 1) << "sequence " << i;
    e.release_sequence(seqs[i]);
  }
  return out;
}

// The server's case: sequences leave the overlapped batch (their last sample unused), join it with
// a prompt among fed tokens (300 of them: more ids than a device keeps at first), come back with a
// host token, and are fed in another order than they were sampled. The tokens must be those of
// the same steps run plainly.
TEST_P(EngineOverlap, SequencesLeaveAndJoinBetweenOverlappedSteps) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = load();
  if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  std::vector<int32_t> long_prompt = {1};
  for (int t = 1; t < 300; ++t) long_prompt.push_back(3 + (t * 37) % 500);
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 403, 407}, {1, 300, 11, 90}, {1, 50}, long_prompt};
  std::vector<std::vector<int>> schedule = {
      {0, 1, 2},     // three prompts
      {0, 1, 2},     // all fed, in order
      {2, 0, 3},     // 1 left out, the other two fed in another order, 3's 300-token prompt
      {0, 3, 2, 1},  // 1 back with its host token
      {1, 0},        // 2 and 3 left out
      {3, 1, 2, 0},  // 3 and 2 back (host tokens), 1 and 0 fed
  };
  for (int k = 0; k < 12; ++k) schedule.push_back({0, 1, 2, 3});
  schedule.push_back({3});
  schedule.push_back({0, 3});
  for (const auto& sp : {greedy(), plain_temperature()}) {
    SCOPED_TRACE("temperature " + std::to_string(sp.temperature));
    const auto plain = run_schedule(*e, prompts, schedule, sp, false);
    const auto over = run_schedule(*e, prompts, schedule, sp, true);
    EXPECT_EQ(over, plain);
    EXPECT_EQ(e->free_blocks(), e->total_blocks());
  }
}

/// Tokens of a sequence that the prefix cache can hand out again: match_prefix on a new sequence.
int cached_prefix(Engine& e, const std::vector<int32_t>& tokens) {
  const SeqId s = e.create_sequence();
  const int n = e.match_prefix(s, tokens);
  e.release_sequence(s);
  return n;
}

TEST_P(EngineOverlap, GenerationEndsAsThePlainPathAndCachesTheSampledTokens) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto plain = load(/*overlap=*/false);
  if (!plain) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  auto over = load();
  const int bs = over->block_size();
  const std::vector<int32_t> prompt = {1};
  Engine::GenerateOptions o;
  o.max_tokens = 60;
  o.sampling = greedy();
  const auto full = plain->generate(prompt, o, nullptr);
  ASSERT_EQ(full.output_ids.size(), 60u);
  // A stop string that ends the text in its middle: the step begun for the token after is
  // cancelled.
  const std::string mid = full.text.substr(full.text.size() / 2, 6);
  for (const auto& stop : {std::vector<std::string>{}, std::vector<std::string>{mid}}) {
    SCOPED_TRACE(stop.empty() ? "length" : "stop '" + mid + "'");
    o.stop = stop;
    const auto want = plain->generate(prompt, o, nullptr);
    const auto got = over->generate(prompt, o, nullptr);
    EXPECT_EQ(got.output_ids, want.output_ids);
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.finish_reason, want.finish_reason);
    EXPECT_EQ(over->steps_outstanding(), 0);
    EXPECT_EQ(over->free_blocks(), over->total_blocks()) << "the sequence's blocks are back";
    // The sequence held the prompt and every output token but the last (never stepped); its full
    // blocks are cached with the sampled tokens (a placeholder left in would break the match).
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), got.output_ids.begin(), got.output_ids.end());
    const int stepped = (int)all.size() - 1;
    EXPECT_EQ(cached_prefix(*over, all), stepped / bs * bs);
  }
}

// A text callback that throws mid-generation, with a step queued: the engine and the backend are
// left with nothing outstanding (a draw left behind would be handed to the next generation).
TEST_P(EngineOverlap, ACallbackThatThrowsLeavesNothingOutstanding) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = load();
  if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  Engine::GenerateOptions o;
  o.max_tokens = 40;
  o.sampling = greedy();
  const auto want = e->generate({1}, o, nullptr);
  int pieces = 0;
  EXPECT_THROW(e->generate({1}, o,
                           [&](const std::string&) {
                             if (++pieces == 3) throw Error("client went away");
                             return true;
                           }),
               Error);
  EXPECT_EQ(e->steps_outstanding(), 0);
  EXPECT_EQ(e->free_blocks(), e->total_blocks());
  const auto again = e->generate({1}, o, nullptr);
  EXPECT_EQ(again.output_ids, want.output_ids);
}

TEST_P(EngineOverlap, RulesAreChecked) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = load();
  if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  Sampler g(greedy());
  const SeqId a = e->create_sequence(), b = e->create_sequence();
  Engine::StepItem fed{a, {}, true, false, &g, false};
  fed.token_from_sample = true;
  Engine::StepResult r;
  EXPECT_THROW(e->step_begin({fed}), Error) << "nothing sampled before";
  EXPECT_THROW(e->step_end(r), Error) << "none outstanding";
  EXPECT_THROW(e->step_cancel(), Error) << "none outstanding";
  e->step_begin({Engine::StepItem{a, {1, 403}, true, false, &g, false}});
  EXPECT_THROW(e->step({Engine::StepItem{b, {1}, true, false, &g, false}}, r), Error)
      << "step() with a step outstanding";
  Engine::StepItem fed_b = fed;
  fed_b.seq = b;
  EXPECT_THROW(e->step_begin({fed_b}), Error) << "b was not sampled by the step before";
  Engine::StepItem both = fed;
  both.tokens = {5};
  EXPECT_THROW(e->step_begin({both}), Error) << "token_from_sample with tokens";
  e->step_begin({fed});
  EXPECT_THROW(e->step_begin({fed}), Error) << "a third outstanding step";
  EXPECT_THROW(e->step_cancel(), Error) << "cancel needs exactly one outstanding";
  e->step_end(r);
  EXPECT_EQ(e->seq_len(a), 3);
  e->step_cancel();
  EXPECT_EQ(e->seq_len(a), 2) << "the cancelled step's token is forgotten";
  EXPECT_EQ(e->steps_outstanding(), 0);
  e->step({Engine::StepItem{a, {r.tokens[0]}, true, false, &g, false}}, r);
  EXPECT_EQ(e->seq_len(a), 3);
  e->release_sequence(a);
  e->release_sequence(b);
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineOverlap, ::testing::ValuesIn(all_test_devices()),
                         DeviceParamName());

}  // namespace
}  // namespace perfx::test
