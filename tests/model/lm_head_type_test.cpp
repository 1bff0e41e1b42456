// --lm-head-type q8_0 / q4_0 (ModelOptions::lm_head_type): the lm_head quantized to GGUF blocks at
// load. Reference: the same model with its lm_head replaced, in the checkpoint, by the blocks
// decoded back to fp32 (int8_from_gguf / int4_from_gguf, the GGUF decoders), run through the float
// path; the two must agree to fp32 rounding. On a tied (stories260K: the head is the embedding
// table) and an untied (tiny-llama3) model; also the head's bytes (34 / 18 per 32 weights), and
// the other backends (f16-ref, PERFX_TEST_DEVICE) within half precision's 5e-2 of the CPU's logits
// with the same head.
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

void expect_quantized_head(const std::string& model, const std::string& ref_file, DType type) {
  SCOPED_TRACE(dtype_name(type));
  std::vector<int32_t> ids;
  std::vector<float> ref;
  int64_t vref = 0, v = 0;
  read_reference(ref_file, &ids, &ref, &vref);

  // The expected model: its lm_head the blocks, decoded.
  Checkpoint ck = open_checkpoint(model);
  const int64_t V = ck.config.vocab_size, H = ck.config.hidden_size;
  const TensorView* head = ck.source->find("lm_head.weight");
  if (!head) head = ck.source->find("model.embed_tokens.weight");  // tied
  ASSERT_NE(head, nullptr);
  const std::vector<uint8_t> blocks = gguf_blocks_from_float(*head, type);
  const TensorView bv{"blocks", type, {V, H}, blocks.data(), blocks.size()};
  std::vector<float> w((size_t)(V * H));
  if (type == DType::Q8_0) {
    const Int8Matrix m = int8_from_gguf(bv);
    for (int64_t r = 0; r < V; ++r)
      for (int64_t k = 0; k < H; ++k) w[(size_t)(r * H + k)] = m.dequant(r, k);
  } else {
    const Int4Matrix m = int4_from_gguf(bv);
    for (int64_t r = 0; r < V; ++r)
      for (int64_t k = 0; k < H; ++k) w[(size_t)(r * H + k)] = m.dequant(r, k);
  }
  ck.source = std::make_unique<HeadOverride>(std::move(ck.source), std::move(w), V, H);
  const auto expected = model_logits(ck, ids, &v);

  ModelOptions mo;
  mo.lm_head_type = type;
  const auto got = model_logits(model, ids, &v, "cpu-exact", mo);
  const auto fp = model_logits(model, ids, &v, "cpu-exact");
  ASSERT_EQ(v, vref);
  ASSERT_EQ(got.size(), expected.size());
  const float d = max_abs_diff(got, expected), d_fp = max_abs_diff(got, fp);
  std::printf(
      "  %s, %s head: max |dlogit| vs the decoded-blocks model %.3g; vs the float head %.3g; "
      "vs transformers %.3g\n",
      model.c_str(), dtype_name(type), d, d_fp, max_abs_diff(got, ref));
  EXPECT_LE(d, 1e-4f) << model;
  EXPECT_GT(d_fp, 1e-3f) << "the quantized head gave the float head's logits: was it used?";
}

TEST(LmHeadType, TiedStories260kEqualsItsDecodedBlocksModel) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/reference_logits.safetensors");
  for (DType t : {DType::Q8_0, DType::Q4_0})
    expect_quantized_head(shared_path("models/stories260K-hf"),
                          shared_path("models/stories260K-hf/reference_logits.safetensors"), t);
}

TEST(LmHeadType, UntiedTinyLlama3EqualsItsDecodedBlocksModel) {
  const std::string dir = source_dir() + "/tests/fixtures/tiny-llama3";
  for (DType t : {DType::Q8_0, DType::Q4_0})
    expect_quantized_head(dir, dir + "/reference_logits.safetensors", t);
}

// GGUF naming (token_embd / output.weight): stories260K.gguf holds the HF folder's weights (Q / K
// permuted for llama.cpp's RoPE), so their logits with the same quantized head agree as their
// float ones do (the parity tests' 1e-3).
TEST(LmHeadType, GgufStories260kMatchesItsHfTwin) {
  PERFX_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  PERFX_REQUIRE_SHARED("models/stories260K-hf/config.json");
  const std::vector<int32_t> ids = {1, 403, 281, 45, 302, 9, 77, 260};
  int64_t v = 0;
  const auto gguf_float = model_logits(shared_path("models/stories260K/stories260K.gguf"), ids, &v);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    ModelOptions mo;
    mo.lm_head_type = t;
    const auto gguf =
        model_logits(shared_path("models/stories260K/stories260K.gguf"), ids, &v, "cpu-exact", mo);
    const auto hf = model_logits(shared_path("models/stories260K-hf"), ids, &v, "cpu-exact", mo);
    EXPECT_LE(max_abs_diff(gguf, hf), 1e-3f) << dtype_name(t);
    EXPECT_GT(max_abs_diff(gguf, gguf_float), 1e-3f)
        << dtype_name(t) << ": the GGUF's head was not quantized";
  }
}

// The head's bytes: 34 (Q8_0) or 18 (Q4_0) per 32 weights instead of the stored type's; a tied
// model (stories260K) keeps its embedding table and adds the quantized head's bytes.
TEST(LmHeadType, HeadBytesAreTheBlocks) {
  auto be = create_backend("cpu-exact", 1);
  const std::string dir = source_dir() + "/tests/fixtures/tiny-llama3";
  Checkpoint ck = open_checkpoint(dir);
  const int64_t V = ck.config.vocab_size, H = ck.config.hidden_size;
  const size_t fp = LlamaModel(ck, *be).weight_bytes();
  const TensorView* head = ck.source->find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    ModelOptions mo;
    mo.lm_head_type = t;
    const size_t q = LlamaModel(ck, *be, mo).weight_bytes();
    EXPECT_EQ(fp - q, head->nbytes - (size_t)(V * H / 32) * dtype_block_bytes(t)) << dtype_name(t);
  }
  PERFX_REQUIRE_SHARED("models/stories260K-hf/config.json");
  Checkpoint tied = open_checkpoint(shared_path("models/stories260K-hf"));
  ASSERT_EQ(tied.source->find("lm_head.weight"), nullptr) << "stories260K-hf is no longer tied";
  const int64_t tv = tied.config.vocab_size, th = tied.config.hidden_size;
  const size_t tied_fp = LlamaModel(tied, *be).weight_bytes();
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    ModelOptions mo;
    mo.lm_head_type = t;
    EXPECT_EQ(LlamaModel(tied, *be, mo).weight_bytes() - tied_fp,
              (size_t)(tv * th / 32) * dtype_block_bytes(t))
        << dtype_name(t);
  }
}

// The library's check (the CLI refuses before it: tests/e2e/cli_run_test.cpp).
TEST(LmHeadType, EngineRefusesAnUnknownType) {
  EngineOptions eo;
  eo.model_path = source_dir() + "/models/default";
  eo.lm_head_type = "no-such-type";
  try {
    Engine::load(eo);
    FAIL() << "loaded with lm_head_type no-such-type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--lm-head-type must be q8_0 or q4_0 (or unset: as stored), got 'no-such-type'"),
              std::string::npos)
        << e.what();
  }
}

class LmHeadTypeDevices : public ::testing::TestWithParam<std::string> {};

TEST_P(LmHeadTypeDevices, MatchCpu) {
  const std::string device = GetParam();
  std::string why;
  if (!device_available(device, &why))
    GTEST_SKIP() << "device '" << device << "' unavailable here: " << why;
  const std::string dir = source_dir() + "/tests/fixtures/tiny-llama3";
  std::vector<int32_t> ids;
  std::vector<float> ref;
  int64_t v = 0;
  read_reference(dir + "/reference_logits.safetensors", &ids, &ref, &v);
  const auto float_head = model_logits(dir, ids, &v, device);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    ModelOptions mo;
    mo.lm_head_type = t;
    const auto cpu = model_logits(dir, ids, &v, "cpu-exact", mo);
    const auto got = model_logits(dir, ids, &v, device, mo);
    const float d = max_abs_diff(got, cpu);
    std::printf("  %s: max |dlogit| vs the CPU, both with the %s head: %.3g\n", device.c_str(),
                dtype_name(t), d);
    EXPECT_LE(d, 5e-2f) << device << " " << dtype_name(t);
    EXPECT_GT(max_abs_diff(got, float_head), 1e-3f)
        << device << ": the " << dtype_name(t)
        << " head gave the float head's logits: was it used?";
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, LmHeadTypeDevices, ::testing::ValuesIn(non_cpu_test_devices()),
                         DeviceParamName());

}  // namespace
}  // namespace perfx::test
