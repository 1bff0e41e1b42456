// L2 warming during attention (CUDA: PERFX_CUDA_L2_PREFETCH, docs/cuda_linear_notes.md §26): the
// GEMV right after attention copies the next weight's first bytes into L2 before its PDL wait.
// Its copies land in a scratch slot nothing reads, so every logit must be bit for bit what the
// same engine gives with warming off — over captured decode graphs, one sequence (where it
// warms) and two (where it does not). On the PERFX_TEST_DEVICE devices that are CUDA; random
// TinyLlama-shaped W4 weights, so the decode GEMVs are the int4 ones that warm.
#include <gtest/gtest.h>

#include <cstdlib>

#include "model/model_test_util.h"
#include "perfx/engine.h"
#include "perfx/sampling.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

class L2Warm : public ::testing::TestWithParam<std::string> {
 protected:
  /// The engine with PERFX_CUDA_L2_PREFETCH set to `mib` while the backend is created (the
  /// backend reads it once); null when the device is not available here.
  std::unique_ptr<Engine> load(const char* mib) {
    std::string why;
    if (!device_available(GetParam(), &why)) return nullptr;
    EngineOptions eo;
    eo.model_path = "random:tinyllama-1.1b";
    eo.tokenizer_path = source_dir() + "/models/default";
    eo.n_threads = 2;
    eo.device = GetParam();
    eo.kv_cache_tokens = 1024;
    setenv("PERFX_CUDA_L2_PREFETCH", mib, 1);
    auto e = Engine::load(eo);
    unsetenv("PERFX_CUDA_L2_PREFETCH");
    return e;
  }
};

/// Every logits row of n greedy decode steps after each prompt, the sequences stepped together.
std::vector<float> decode_logits(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                 int n) {
  SamplingParams sp;
  sp.temperature = 0;
  PromptedSequences b = start_sequences(e, prompts, sp);
  auto& items = b.items;
  for (auto& it : items) it.copy_logits = true;
  std::vector<float> all;
  Engine::StepResult r;
  for (int s = 0; s < n; ++s) {
    e.step(items, r);
    all.insert(all.end(), r.logits.begin(), r.logits.end());
    for (size_t i = 0; i < items.size(); ++i) items[i].tokens = {r.tokens[i]};
  }
  b.release(e);
  return all;
}

TEST_P(L2Warm, LogitsEqualTheUnwarmedEngines) {
  const std::vector<std::vector<int32_t>> one = {{1, 450, 4996, 17354, 1701}};
  const std::vector<std::vector<int32_t>> two = {{1, 450, 4996}, {1, 3118, 2501, 727, 263, 931}};
  std::vector<float> off1, off2;
  {
    auto e = load("0");
    if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
    off1 = decode_logits(*e, one, 24);
    off2 = decode_logits(*e, two, 12);
  }
  // 1 MiB forced (any size of next weight) and the default rule (8 MiB where it is <= 16 MiB)
  for (const char* mib : {"1", ""}) {
    auto e = load(mib);
    ASSERT_TRUE(e);
    const std::vector<float> on1 = decode_logits(*e, one, 24);
    const std::vector<float> on2 = decode_logits(*e, two, 12);
    ASSERT_EQ(on1.size(), off1.size());
    ASSERT_EQ(on2.size(), off2.size());
    ASSERT_GT(off1.size(), 0u);
    size_t diff1 = 0, diff2 = 0;
    for (size_t i = 0; i < on1.size(); ++i) diff1 += on1[i] != off1[i];
    for (size_t i = 0; i < on2.size(); ++i) diff2 += on2[i] != off2[i];
    EXPECT_EQ(diff1, 0u) << "PERFX_CUDA_L2_PREFETCH='" << mib << "', one sequence";
    EXPECT_EQ(diff2, 0u) << "PERFX_CUDA_L2_PREFETCH='" << mib << "', two sequences";
  }
}

std::vector<std::string> cuda_devices() {
  std::vector<std::string> d;
  for (const auto& x : env_test_devices())
    if (x.rfind("cuda", 0) == 0) d.push_back(x);
  if (d.empty()) d.push_back("cuda:0");  // skips where there is no GPU
  return d;
}

INSTANTIATE_TEST_SUITE_P(Devices, L2Warm, ::testing::ValuesIn(cuda_devices()), DeviceParamName());

}  // namespace
}  // namespace perfx::test
