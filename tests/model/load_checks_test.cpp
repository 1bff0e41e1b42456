// What a checkpoint's tensors must agree with before LlamaModel loads it: GGUF tensors of a type
// the engine does not load are named (never skipped: output.weight of such a type made the model
// run on the tied embedding), and layers beyond the configured count, or a count far beyond the
// layers present, are errors (they ran silently, or died allocating).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/llama.h"
#include "model/model_test_util.h"
#include "model/weights.h"
#include "support/test_support.h"
#include "unit/formats/formats_test_util.h"

namespace perfx::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kH = 32, kI = 64, kV = 16;

// A 2-layer Llama GGUF (hidden 32, 2 heads of 16, FFN 64, vocab 16), every tensor F32 except those
// in `types` (name -> ggml type id, data zeros of the F32 size).
std::string tiny_gguf(const TempDir& d, uint32_t block_count,
                      const std::map<std::string, uint32_t>& types = {}) {
  GgufBuilder b;
  b.kv_str("general.architecture", "llama")
      .kv_u32("llama.context_length", 64)
      .kv_u32("llama.embedding_length", (uint32_t)kH)
      .kv_u32("llama.block_count", block_count)
      .kv_u32("llama.feed_forward_length", (uint32_t)kI)
      .kv_u32("llama.attention.head_count", 2)
      .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .kv_u32("llama.vocab_size", (uint32_t)kV);
  uint32_t seed = 1;
  auto add = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (uint64_t x : ne) n *= x;
    auto it = types.find(name);
    if (it != types.end()) {
      b.tensor(name, ne, it->second, std::string(n * 4, '\0'));
      return;
    }
    std::vector<float> v = random_normal(n, seed++);
    for (float& x : v) x *= 0.1f;
    if (ne.size() == 1) v.assign(n, 1.0f);  // norms
    b.tensor(name, ne, 0, f32_bytes(v));
  };
  add("token_embd.weight", {kH, kV});
  add("output_norm.weight", {kH});
  add("output.weight", {kH, kV});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {kH});
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output"})
      add(p + t + ".weight", {kH, kH});
    add(p + "ffn_norm.weight", {kH});
    add(p + "ffn_gate.weight", {kH, kI});
    add(p + "ffn_up.weight", {kH, kI});
    add(p + "ffn_down.weight", {kI, kH});
  }
  const std::string path = d.file("tiny.gguf");
  write_bytes(path, b.build());
  return path;
}

std::string load_error(const std::string& path) {
  return error_of([&] {
    const Checkpoint ck = open_checkpoint(path);
    auto be = create_backend("cpu", 1);
    LlamaModel model(ck, *be);
  });
}

// tests/fixtures/tiny-llama3 (2 layers) copied with config.json's num_hidden_layers replaced.
std::string tiny_llama3_with_layers(const TempDir& d, int64_t layers) {
  namespace fs = std::filesystem;
  const std::string dir = d.file("tiny-llama3");
  fs::copy(source_dir() + "/tests/fixtures/tiny-llama3", dir);
  nlohmann::json c = nlohmann::json::parse(read_file(dir + "/config.json"));
  EXPECT_EQ(c["num_hidden_layers"], 2);
  c["num_hidden_layers"] = layers;
  write_text(dir + "/config.json", c.dump(2));
  return dir;
}

TEST(LoadChecks, TinyGgufRuns) {  // the control the cases below break one thing of
  TempDir d;
  int64_t vocab = 0;
  const std::vector<float> lg = model_logits(tiny_gguf(d, 2), {1, 2, 3}, &vocab);
  EXPECT_EQ(vocab, (int64_t)kV);
  ASSERT_EQ(lg.size(), 3 * kV);
  for (float x : lg) EXPECT_TRUE(std::isfinite(x));
  EXPECT_GT(max_abs_diff(lg, std::vector<float>(lg.size(), 0.0f)), 1e-3f);
}

TEST(LoadChecks, GgufOutputWeightOfUnsupportedTypeIsNamed) {
  TempDir d;
  for (const auto& [type, name] :
       std::map<uint32_t, std::string>{{6, "Q5_0"}, {10, "Q2_K"}, {28, "F64"}, {16, "IQ2_XXS"}}) {
    const std::string e = load_error(tiny_gguf(d, 2, {{"output.weight", type}}));
    EXPECT_THAT(e,
                HasSubstr("tensor 'output.weight' in " + d.file("tiny.gguf") + " has type " + name +
                          ", which this engine does not load; supported: F32, F16, "
                          "BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K"));
  }
}

TEST(LoadChecks, GgufLayerTensorOfUnsupportedTypeIsNamedNotMissing) {
  TempDir d;
  std::string e = load_error(tiny_gguf(d, 2, {{"blk.0.attn_q.weight", 7}}));
  EXPECT_THAT(e, HasSubstr("tensor 'blk.0.attn_q.weight' in " + d.file("tiny.gguf") +
                           " has type Q5_1, which this engine does not load"));
  EXPECT_THAT(e, Not(HasSubstr("missing")));
  e = load_error(tiny_gguf(d, 2, {{"blk.1.ffn_norm.weight", 28}}));
  EXPECT_THAT(
      e, HasSubstr("tensor 'blk.1.ffn_norm.weight' in " + d.file("tiny.gguf") + " has type F64"));
  e = load_error(tiny_gguf(d, 2, {{"token_embd.weight", 11}}));
  EXPECT_THAT(e,
              HasSubstr("tensor 'token_embd.weight' in " + d.file("tiny.gguf") + " has type Q3_K"));
}

TEST(LoadChecks, GgufLayersBeyondBlockCountAreAnError) {
  TempDir d;
  EXPECT_EQ(load_error(tiny_gguf(d, 1)),
            "checkpoint " + d.file("tiny.gguf") +
                " has layer 1's tensors (e.g. 'blk.1.attn_norm.weight') but its metadata says "
                "llama.block_count = 1");
}

TEST(LoadChecks, GgufBlockCountBeyondTheTensorsIsAnError) {
  TempDir d;
  const std::string path = tiny_gguf(d, 2147483647);
  EXPECT_EQ(load_error(path), "missing tensor 'blk.2147483646.attn_norm.weight' in " + path +
                                  ": its metadata says llama.block_count = 2147483647 but the "
                                  "checkpoint's last layer is 1");
}

TEST(LoadChecks, SafetensorsLayersBeyondConfigAreAnError) {
  TempDir d;
  const std::string dir = tiny_llama3_with_layers(d, 1);
  const std::string e = load_error(dir);
  EXPECT_THAT(e, HasSubstr("checkpoint " + dir + " has layer 1's tensors (e.g. 'model.layers.1."));
  EXPECT_THAT(e, HasSubstr("') but config says num_hidden_layers = 1"));
}

TEST(LoadChecks, SafetensorsLayerCountBeyondTheTensorsIsAnError) {
  TempDir d;
  const std::string dir = tiny_llama3_with_layers(d, 2147483647);
  EXPECT_EQ(load_error(dir), "missing tensor 'model.layers.2147483646.input_layernorm.weight' in " +
                                 dir +
                                 ": config says num_hidden_layers = 2147483647 but the "
                                 "checkpoint's last layer is 1");
}

// The checks must not refuse real checkpoints: tied heads, AWQ qweight/qzeros/scales, qwen biases
// and norms, stories260K's GGUF and HF twins, the bundled default.
TEST(LoadChecks, RealCheckpointsStillLoad) {
  std::vector<std::string> paths;
  for (const char* f : {"tiny-llama3", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-awq-gemm",
                        "tiny-awq-gemv"})
    paths.push_back(source_dir() + "/tests/fixtures/" + f);
  paths.push_back(source_dir() + "/models/default");
  for (const char* f : {"models/stories260K-hf", "models/stories260K/stories260K.gguf"})
    if (path_exists_for_test(shared_path(f))) paths.push_back(shared_path(f));
  for (const std::string& p : paths) {
    SCOPED_TRACE(p);
    const Checkpoint ck = open_checkpoint(p);
    auto be = create_backend("cpu", 1);
    EXPECT_NO_THROW({ LlamaModel model(ck, *be); });
  }
}

}  // namespace
}  // namespace perfx::test
