// Logits parity with transformers (fp32) on real and tiny random checkpoints: max |Δ| <= 1e-3.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/model_test_util.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

void expect_parity(const std::string& model_dir, const std::string& ref_file, float tol) {
  std::vector<int32_t> ids;
  std::vector<float> ref;
  int64_t vref = 0, v = 0;
  read_reference(ref_file, &ids, &ref, &vref);
  const auto got = model_logits(model_dir, ids, &v);
  ASSERT_EQ(v, vref);
  ASSERT_EQ(got.size(), ref.size());
  const float d = max_abs_diff(got, ref);
  EXPECT_LE(d, tol) << model_dir;
  EXPECT_GT(d, 0.0f) << "bit-identical to the reference is implausible: is the comparison real?";
  std::printf("  %s: max |dlogit| = %.3g over %zu logits\n", model_dir.c_str(), d, got.size());
  // argmax agreement as a second, independent check
  for (size_t t = 0; t < ids.size(); ++t) {
    size_t a = 0, b = 0;
    for (int64_t i = 1; i < v; ++i) {
      if (got[t * v + i] > got[t * v + a]) a = i;
      if (ref[t * v + i] > ref[t * v + b]) b = i;
    }
    EXPECT_EQ(a, b) << "position " << t;
  }
}

TEST(LogitsParity, Stories260kHf) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/reference_logits.safetensors");
  expect_parity(shared_path("models/stories260K-hf"), shared_path("models/stories260K-hf/reference_logits.safetensors"),
                1e-3f);
}

TEST(LogitsParity, Stories260kGgufMatchesHfReference) {
  // The GGUF holds the same weights with llama.cpp's Q/K permutation (interleaved RoPE).
  PERFX_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  expect_parity(shared_path("models/stories260K/stories260K.gguf"),
                shared_path("models/stories260K-hf/reference_logits.safetensors"), 1e-3f);
}

class TinyFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyFamily, MatchesTransformers) {
  const std::string dir = source_dir() + "/tests/fixtures/" + GetParam();
  if (!path_exists_for_test(dir + "/reference_logits.safetensors")) GTEST_FAIL() << "fixture missing: " << dir;
  expect_parity(dir, dir + "/reference_logits.safetensors", 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Families, TinyFamily,
                         ::testing::Values("tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-llama3"));

}  // namespace
}  // namespace perfx::test
