// Greedy generation against golden outputs: llama2.c's run.c on stories260K (HF and GGUF), and
// transformers' greedy ids on the bundled default model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "model/model_test_util.h"
#include "perfx/engine.h"
#include "perfx/model_config.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

std::vector<int32_t> golden_ids(const std::string& ids_file) {
  std::istringstream ss(read_file(ids_file));
  std::string line;
  while (std::getline(ss, line))
    if (line.rfind("IDS:", 0) == 0) {
      auto v = parse_ints(line.substr(4));
      return std::vector<int32_t>(v.begin(), v.end());
    }
  return {};
}

Engine::GenerateResult greedy(Engine& e, const std::vector<int32_t>& prompt, int n) {
  Engine::GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = false;
  return e.generate(prompt, o, nullptr);
}

void expect_golden_stories(const std::string& model) {
  EngineOptions eo;
  eo.model_path = model;
  eo.n_threads = 2;
  auto e = Engine::load(eo);
  const auto want = golden_ids(shared_path("models/stories260K-hf/golden_greedy_n256.ids"));
  ASSERT_EQ(want.size(), 256u);
  ASSERT_EQ(e->tokenizer().bos_id(), 1);
  auto r = greedy(*e, {1}, 256);
  EXPECT_EQ(r.output_ids, want);
  std::string txt = read_file(shared_path("models/stories260K-hf/golden_greedy_n256.txt"));
  ASSERT_FALSE(txt.empty());
  txt.pop_back();  // run.c prints a newline after generating
  EXPECT_EQ(r.text, txt);
}

TEST(GreedyGolden, Stories260kHf) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/golden_greedy_n256.ids");
  expect_golden_stories(shared_path("models/stories260K-hf"));
}

TEST(GreedyGolden, Stories260kGguf) {
  PERFX_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  expect_golden_stories(shared_path("models/stories260K/stories260K.gguf"));
}

TEST(GreedyGolden, DefaultModelMatchesTransformers) {
  const std::string dir = source_dir() + "/models/default";
  auto ref = nlohmann::json::parse(read_file(dir + "/reference_greedy.json"));
  ASSERT_EQ(ref.size(), 2u);
  EngineOptions eo;
  eo.model_path = dir;
  eo.n_threads = 2;
  auto e = Engine::load(eo);
  for (const auto& c : ref) {
    const auto prompt = e->tokenizer().encode(c["prompt"].get<std::string>(), true);
    EXPECT_EQ(prompt, c["prompt_ids"].get<std::vector<int32_t>>()) << c["prompt"];
    Engine::GenerateOptions o;
    o.max_tokens = 64;
    o.sampling.temperature = 0;
    o.ignore_eos = true;
    auto r = e->generate(prompt, o, nullptr);
    EXPECT_EQ(r.output_ids, c["generated_ids"].get<std::vector<int32_t>>()) << c["prompt"];
    EXPECT_EQ(r.text, c["text"].get<std::string>());
  }
}

// ---- the same goldens on other backends (f16-ref and PERFX_TEST_DEVICE): greedy output equal to
// the CPU's golden ids.

class GreedyOnDevice : public ::testing::TestWithParam<std::string> {};

std::unique_ptr<Engine> load_on(const std::string& model, const std::string& device) {
  EngineOptions eo;
  eo.model_path = model;
  eo.n_threads = 2;
  eo.device = device;
  std::string why;
  if (!device_available(device, &why)) return nullptr;
  return Engine::load(eo);
}

bool bf16_activations(const std::string& device) {
  std::string why;
  return device_available(device, &why) && create_backend(device, 1)->act_dtype() == DType::BF16;
}

/// Greedy output of a device against the CPU's golden ids. With half-precision activations the
/// logits move by up to ~0.02 (BackendParity), so a step where the fp32 reference's top-2 margin is
/// smaller than that can flip, after which the two continuations legitimately differ. The rule:
/// the outputs are equal, or they first differ at a step whose fp32 top-2 margin is below 0.05 (the
/// parity tolerance) — a flip anywhere else is a real error. The step and margin are printed.
void expect_greedy_equal(const std::string& model, const std::vector<int32_t>& prompt,
                         const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return;
  ASSERT_TRUE(i < got.size() && i < want.size())
      << "outputs of different lengths " << got.size() << " vs " << want.size();
  EngineOptions eo;
  eo.model_path = model;
  eo.n_threads = 2;
  auto cpu = Engine::load(eo);
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), want.begin(), want.begin() + (long)i);
  std::vector<float> logits;
  cpu->prompt_logits(ids, logits);
  const size_t V = (size_t)cpu->config().vocab_size;
  std::vector<float> last(logits.end() - (long)V, logits.end());
  std::partial_sort(last.begin(), last.begin() + 2, last.end(), std::greater<float>());
  const float margin = last[0] - last[1];
  std::printf(
      "  greedy: %zu of %zu tokens equal; at token %zu (got %d, want %d) the fp32 top-2 margin is "
      "%.4f\n",
      i, want.size(), i, got[i], want[i], margin);
  EXPECT_LT(margin, 0.05f) << "the outputs part at generated token " << i
                           << " where the fp32 reference's top-2 "
                           << "margin is " << margin << ": not a near-tie, a real difference";
}

TEST_P(GreedyOnDevice, Stories260kHf256Tokens) {
  if (bf16_activations(GetParam()))
    GTEST_SKIP()
        << "greedy equality is asserted for fp16 activations; bf16's 8-bit mantissa moves logits "
           "by ~0.2 (BackendParity), enough to flip near-ties";
  PERFX_REQUIRE_SHARED("models/stories260K-hf/golden_greedy_n256.ids");
  auto e = load_on(shared_path("models/stories260K-hf"), GetParam());
  if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  const auto want = golden_ids(shared_path("models/stories260K-hf/golden_greedy_n256.ids"));
  const auto got = greedy(*e, {1}, 256).output_ids;
  expect_greedy_equal(shared_path("models/stories260K-hf"), {1}, got, want);
}

TEST_P(GreedyOnDevice, DefaultModel) {
  if (bf16_activations(GetParam()))
    GTEST_SKIP()
        << "greedy equality is asserted for fp16 activations; bf16's 8-bit mantissa moves logits "
           "by ~0.2 (BackendParity), enough to flip near-ties";
  const std::string dir = source_dir() + "/models/default";
  auto e = load_on(dir, GetParam());
  if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  for (const auto& c : nlohmann::json::parse(read_file(dir + "/reference_greedy.json"))) {
    Engine::GenerateOptions o;
    o.max_tokens = 64;
    o.sampling.temperature = 0;
    o.ignore_eos = true;
    const auto prompt = e->tokenizer().encode(c["prompt"].get<std::string>(), true);
    const auto want = c["generated_ids"].get<std::vector<int32_t>>();
    const auto got = e->generate(prompt, o, nullptr).output_ids;
    SCOPED_TRACE(c["prompt"].get<std::string>());
    expect_greedy_equal(dir, prompt, got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GreedyOnDevice, ::testing::ValuesIn(non_cpu_test_devices()),
                         DeviceParamName());

}  // namespace
}  // namespace perfx::test
