// CUDA decode, bit for bit: over captured, PDL-chained decode graphs the logits must not depend on
// timing. On the PERFX_TEST_DEVICE devices that are CUDA (skipped where there is none); random
// TinyLlama-shaped W4 weights, so the decode GEMVs are the int4 ones (w4_gemv, and w4_gemv3 for
// gate|up) and the GEMV after attention warms L2.
#include <gtest/gtest.h>

#include <cstdlib>

#include "model/model_test_util.h"
#include "perfx/engine.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

class CudaDecodeBits : public ::testing::TestWithParam<std::string> {
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
    eo.ctx = 256;
    eo.kv_cache_tokens = 1024;
    setenv("PERFX_CUDA_L2_PREFETCH", mib, 1);
    auto e = Engine::load(eo);
    unsetenv("PERFX_CUDA_L2_PREFETCH");
    return e;
  }
};

/// One engine's decode repeats bit for bit, and a second engine's equals the first's. Caught a
/// race: w4_gemv3 loaded its activations with ld.global.nc, which under PDL returned values from
/// before the previous kernel's writes now and then (every logit of steps >= 1 differed by up to
/// 2e-3 between runs; docs/cuda_linear_notes.md §27).
TEST_P(CudaDecodeBits, DecodeRepeats) {
  const std::vector<std::vector<int32_t>> one = {{1, 450, 4996, 17354, 1701}};
  auto e = load("0");
  if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
  const std::vector<float> first = greedy_step_logits(*e, one, 24);
  std::vector<std::vector<float>> again;
  for (int r = 0; r < 2; ++r) again.push_back(greedy_step_logits(*e, one, 24));
  auto e2 = load("0");
  again.push_back(greedy_step_logits(*e2, one, 24));
  ASSERT_GT(first.size(), 0u);
  for (size_t r = 0; r < again.size(); ++r) {
    ASSERT_EQ(again[r].size(), first.size());
    size_t diff = 0;
    for (size_t i = 0; i < first.size(); ++i) diff += again[r][i] != first[i];
    EXPECT_EQ(diff, 0u) << (r < 2 ? "the same engine" : "a second engine") << ", run " << r + 1;
  }
}

/// L2 warming during attention (PERFX_CUDA_L2_PREFETCH, docs/cuda_linear_notes.md §26): the GEMV
/// right after attention copies the next weight's first bytes into L2 before its PDL wait. Its
/// copies land in a scratch slot nothing reads, so every logit must be bit for bit what the same
/// engine gives with warming off — one sequence (where it warms) and two (where it does not).
TEST_P(CudaDecodeBits, L2WarmChangesNoLogit) {
  const std::vector<std::vector<int32_t>> one = {{1, 450, 4996, 17354, 1701}};
  const std::vector<std::vector<int32_t>> two = {{1, 450, 4996}, {1, 3118, 2501, 727, 263, 931}};
  std::vector<float> off1, off2;
  {
    auto e = load("0");
    if (!e) GTEST_SKIP() << "device " << GetParam() << " unavailable here";
    off1 = greedy_step_logits(*e, one, 24);
    off2 = greedy_step_logits(*e, two, 12);
  }
  // 1 MiB forced (any size of next weight) and the default rule (8 MiB where it is <= 16 MiB)
  for (const char* mib : {"1", ""}) {
    auto e = load(mib);
    ASSERT_TRUE(e);
    const std::vector<float> on1 = greedy_step_logits(*e, one, 24);
    const std::vector<float> on2 = greedy_step_logits(*e, two, 12);
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

INSTANTIATE_TEST_SUITE_P(Devices, CudaDecodeBits, ::testing::ValuesIn(cuda_devices()),
                         DeviceParamName());

}  // namespace
}  // namespace perfx::test
