// Engine::step: sampling on the backend (the step returns ids; logits reach the host only for the
// items that ask), and KV allocation as an explicit, all-or-nothing admission test.
#include <gtest/gtest.h>

#include <algorithm>

#include "perfx/engine.h"
#include "perfx/model_config.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

std::unique_ptr<Engine> stories(int kv_tokens = 0) {
  EngineOptions eo;
  eo.model_path = shared_path("models/stories260K-hf");
  eo.n_threads = 2;
  eo.kv_cache_tokens = kv_tokens;
  return Engine::load(eo);
}

TEST(EngineStep, SamplesOnTheBackendAndCopiesOnlyTheRowsAskedFor) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = stories();
  const int V = (int)e->config().vocab_size;
  SamplingParams greedy_p;
  greedy_p.temperature = 0;
  SamplingParams hot;
  hot.temperature = 1.2f;
  hot.top_k = 0;
  hot.top_p = 0.9f;
  hot.min_p = 0;
  hot.repeat_penalty = 1.3f;
  hot.seed = 77;
  Sampler g(greedy_p), h(hot), h_twin(hot);
  const SeqId a = e->create_sequence(), b = e->create_sequence(), c = e->create_sequence();
  for (int32_t t : {1, 403, 407}) h.accept(t), h_twin.accept(t);
  std::vector<Engine::StepItem> items(3);
  items[0] = {a, {1, 403, 407}, true, false, &g, true};  // greedy, logits copied
  items[1] = {b, {1, 403, 407}, true, false, &h, true};  // sampled, logits copied
  items[2] = {c, {1, 300}, true, false, &g, false};      // greedy, nothing copied
  Engine::StepResult r;
  e->step(items, r);
  ASSERT_EQ(r.tokens.size(), 3u);
  ASSERT_EQ(r.logits.size(), 2u * V) << "only the two items with copy_logits";
  // Rows a and b hold the same sequence: identical raw logits.
  EXPECT_TRUE(std::equal(r.logits.begin(), r.logits.begin() + V, r.logits.begin() + V));
  const int32_t argmax =
      (int32_t)(std::max_element(r.logits.begin(), r.logits.begin() + V) - r.logits.begin());
  EXPECT_EQ(r.tokens[0], argmax);
  std::vector<float> row(r.logits.begin() + V, r.logits.end());
  EXPECT_EQ(r.tokens[1], h_twin.sample(row.data(), V)) << "the same draw as the host sampler";
  EXPECT_GE(r.tokens[2], 0);
  for (SeqId s : {a, b, c}) e->release_sequence(s);
}

TEST(EngineStep, AllocateSlotsIsAllOrNothing) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto e = stories(512);  // 32 blocks of 16
  ASSERT_EQ(e->total_blocks(), 32);
  const SeqId a = e->create_sequence(), b = e->create_sequence();
  EXPECT_TRUE(e->allocate_slots(a, 500));  // 32 blocks
  EXPECT_EQ(e->free_blocks(), 0);
  EXPECT_TRUE(e->allocate_slots(a, 500)) << "already held: nothing more needed";
  EXPECT_EQ(e->blocks_needed(a, 500), 0);
  EXPECT_FALSE(e->allocate_slots(b, 1)) << "no block free";
  EXPECT_EQ(e->seq_len(b), 0);
  e->release_sequence(a);
  EXPECT_EQ(e->free_blocks(), 32);
  EXPECT_TRUE(e->allocate_slots(b, 17));  // 2 blocks
  EXPECT_EQ(e->free_blocks(), 30);
  std::vector<float> logits;
  e->step_logits({Engine::StepItem{b, std::vector<int32_t>(17, 5), true, false}}, logits);
  EXPECT_EQ(e->free_blocks(), 30) << "the step used the allocated blocks";
  EXPECT_EQ(e->seq_len(b), 17);
  e->release_sequence(b);
}

}  // namespace
}  // namespace perfx::test
