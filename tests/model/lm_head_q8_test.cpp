// --lm-head-type q8_0 (ModelOptions::lm_head_q8_0): the lm_head quantized to GGUF Q8_0 at load.
// Reference: the same model with its lm_head replaced, in the checkpoint, by the Q8_0 weights
// decoded back to fp32 (int8_from_gguf, the GGUF decoder), run through the float path; the two
// must agree to fp32 rounding. On a tied (stories260K: the head is the embedding table) and an
// untied (tiny-llama3) model; also the head's bytes at Q8_0's 34 per 32 weights, and the other
// backends (f16-ref, PERFX_TEST_DEVICE) within half precision's 5e-2 of the CPU's Q8_0-head logits.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "backend/backend.h"
#include "core/quantized.h"
#include "model/model_test_util.h"
#include "model/weights.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

/// A checkpoint's tensors with "lm_head.weight" replaced (or added, for a tied model) by fp32
/// values.
class HeadOverride : public TensorSource {
 public:
  HeadOverride(std::unique_ptr<TensorSource> inner, std::vector<float> head, int64_t v, int64_t h)
      : inner_(std::move(inner)), data_(std::move(head)) {
    head_ = TensorView{"lm_head.weight", DType::F32, {v, h}, data_.data(), data_.size() * 4};
  }
  const TensorView* find(const std::string& name) const override {
    return name == "lm_head.weight" ? &head_ : inner_->find(name);
  }
  std::vector<std::string> names() const override {
    auto n = inner_->names();
    if (!inner_->find("lm_head.weight")) n.push_back("lm_head.weight");
    return n;
  }

 private:
  std::unique_ptr<TensorSource> inner_;
  std::vector<float> data_;
  TensorView head_;
};

void expect_q8_head(const std::string& model, const std::string& ref_file) {
  std::vector<int32_t> ids;
  std::vector<float> ref;
  int64_t vref = 0, v = 0;
  read_reference(ref_file, &ids, &ref, &vref);

  // The expected model: its lm_head the Q8_0 weights, decoded.
  Checkpoint ck = open_checkpoint(model);
  const int64_t V = ck.config.vocab_size, H = ck.config.hidden_size;
  const TensorView* head = ck.source->find("lm_head.weight");
  if (!head) head = ck.source->find("model.embed_tokens.weight");  // tied
  ASSERT_NE(head, nullptr);
  const std::vector<uint8_t> blocks = q8_0_from_float(*head);
  const Int8Matrix m =
      int8_from_gguf(TensorView{"q8", DType::Q8_0, {V, H}, blocks.data(), blocks.size()});
  std::vector<float> w((size_t)(V * H));
  for (int64_t r = 0; r < V; ++r)
    for (int64_t k = 0; k < H; ++k) w[(size_t)(r * H + k)] = m.dequant(r, k);
  ck.source = std::make_unique<HeadOverride>(std::move(ck.source), std::move(w), V, H);
  const auto expected = model_logits(ck, ids, &v);

  ModelOptions q8;
  q8.lm_head_q8_0 = true;
  const auto got = model_logits(model, ids, &v, "cpu-exact", q8);
  const auto fp = model_logits(model, ids, &v, "cpu-exact");
  ASSERT_EQ(v, vref);
  ASSERT_EQ(got.size(), expected.size());
  const float d = max_abs_diff(got, expected), d_fp = max_abs_diff(got, fp);
  std::printf(
      "  %s: max |dlogit| vs the decoded-Q8_0 model %.3g; vs the float head %.3g; "
      "vs transformers %.3g\n",
      model.c_str(), d, d_fp, max_abs_diff(got, ref));
  EXPECT_LE(d, 1e-4f) << model;
  EXPECT_GT(d_fp, 1e-3f) << "the Q8_0 head gave the float head's logits: was it used?";
}

TEST(LmHeadQ8, TiedStories260kEqualsItsDecodedQ8Model) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/reference_logits.safetensors");
  expect_q8_head(shared_path("models/stories260K-hf"),
                 shared_path("models/stories260K-hf/reference_logits.safetensors"));
}

TEST(LmHeadQ8, UntiedTinyLlama3EqualsItsDecodedQ8Model) {
  const std::string dir = source_dir() + "/tests/fixtures/tiny-llama3";
  expect_q8_head(dir, dir + "/reference_logits.safetensors");
}

// The head's bytes: Q8_0's 34 per 32 weights instead of the stored type's.
TEST(LmHeadQ8, HeadBytesAreQ8_0) {
  const std::string dir = source_dir() + "/tests/fixtures/tiny-llama3";
  Checkpoint ck = open_checkpoint(dir);
  const int64_t V = ck.config.vocab_size, H = ck.config.hidden_size;
  auto be = create_backend("cpu-exact", 1);
  const size_t fp = LlamaModel(ck, *be).weight_bytes();
  ModelOptions q8;
  q8.lm_head_q8_0 = true;
  const size_t q = LlamaModel(ck, *be, q8).weight_bytes();
  const TensorView* head = ck.source->find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(fp - q, head->nbytes - (size_t)(V * H / 32 * 34));
}

// The library's check (the CLI refuses before it: tests/e2e/cli_run_test.cpp).
TEST(LmHeadQ8, EngineRefusesAnUnknownType) {
  EngineOptions eo;
  eo.model_path = source_dir() + "/models/default";
  eo.lm_head_type = "q4_0";
  try {
    Engine::load(eo);
    FAIL() << "loaded with lm_head_type q4_0";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--lm-head-type must be q8_0 (or unset: as stored), got 'q4_0'"),
        std::string::npos)
        << e.what();
  }
}

class LmHeadQ8Devices : public ::testing::TestWithParam<std::string> {};

TEST_P(LmHeadQ8Devices, MatchCpu) {
  const std::string device = GetParam();
  std::string why;
  if (!device_available(device, &why))
    GTEST_SKIP() << "device '" << device << "' unavailable here: " << why;
  const std::string dir = source_dir() + "/tests/fixtures/tiny-llama3";
  std::vector<int32_t> ids;
  std::vector<float> ref;
  int64_t v = 0;
  read_reference(dir + "/reference_logits.safetensors", &ids, &ref, &v);
  ModelOptions q8;
  q8.lm_head_q8_0 = true;
  const auto cpu = model_logits(dir, ids, &v, "cpu-exact", q8);
  const auto got = model_logits(dir, ids, &v, device, q8);
  const float d = max_abs_diff(got, cpu);
  std::printf("  %s: max |dlogit| vs the CPU, both with the Q8_0 head: %.3g\n", device.c_str(), d);
  EXPECT_LE(d, 5e-2f) << device;
  EXPECT_GT(max_abs_diff(got, model_logits(dir, ids, &v, device)), 1e-3f)
      << device << ": the Q8_0 head gave the float head's logits: was it used?";
}

INSTANTIATE_TEST_SUITE_P(Devices, LmHeadQ8Devices, ::testing::ValuesIn(non_cpu_test_devices()),
                         DeviceParamName());

}  // namespace
}  // namespace perfx::test
