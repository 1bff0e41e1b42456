#include "formats/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "formats/gguf.h"
#include "formats_test_util.h"
#include "support/test_support.h"

using namespace perfx;
using perfx::test::error_of;
using perfx::test::GgufBuilder;
using perfx::test::TempDir;
using perfx::test::write_text;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace tb = perfx::test;

namespace {

ModelConfig parse(const std::string& text) {
  return parse_hf_config(text, "test/config.json");
}
std::string parse_error(const std::string& text) {
  return error_of([&] { parse(text); });
}

// Real config.json excerpts (values as published on the HF Hub; FORMATS.md §5.4).
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936, "attention_bias": false})";

const char* kQwen3_4B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2560, "initializer_range": 0.02, "intermediate_size": 9728,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

const char* kMistral7B_v01 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

}  // namespace

// ---------------------------------------------------------------------------------------------
// Families

TEST(HfConfig, Stories260KReal) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/config.json");
  const ModelConfig c = load_hf_config(test::shared_path("models/stories260K-hf"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);  // from rope_parameters
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.rope_interleaved);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_FALSE(c.quant.enabled);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
}

TEST(HfConfig, Llama32WithLlama3RopeScalingAndEosList) {
  const ModelConfig c = parse(kLlama32_1B);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, 1.0f);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, 128256);
}

TEST(HfConfig, Qwen2BiasRule) {
  ModelConfig c = parse(kQwen25_05B);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.qkv_bias);  // always, although attention_bias is false
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151645}));
  // attention_bias true does not give o_proj a bias in Qwen2.
  std::string t = kQwen25_05B;
  t.replace(t.find("\"attention_bias\": false"), 23, "\"attention_bias\": true");
  c = parse(t);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
}

TEST(HfConfig, Qwen3HeadDimDiffersFromHiddenOverHeads) {
  ModelConfig c = parse(kQwen3_4B);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_NE(c.head_dim, c.hidden_size / c.num_attention_heads);  // 2560 / 32 = 80
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);  // integer JSON value accepted as a number
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  std::string t = kQwen3_4B;
  t.replace(t.find("\"attention_bias\": false"), 23, "\"attention_bias\": true");
  c = parse(t);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
}

TEST(HfConfig, SlidingWindow) {
  EXPECT_EQ(parse(kMistral7B_v01).sliding_window, 4096);
  EXPECT_EQ(parse(R"({"model_type": "mistral", "sliding_window": null})").sliding_window, 0);
  EXPECT_EQ(parse(R"({"model_type": "llama", "sliding_window": 4096})").sliding_window, 0);
  // Qwen: the window is off unless use_sliding_window, which we refuse rather than ignore.
  EXPECT_EQ(parse(R"({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": false})")
                .sliding_window,
            0);
  EXPECT_NE(parse_error(R"({"model_type": "qwen2", "sliding_window": 64, "use_sliding_window": true})")
                .find("use_sliding_window"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"model_type": "mistral", "sliding_window": -1})").find("sliding_window"),
            std::string::npos);
}

TEST(HfConfig, MistralAndLlamaDefaults) {
  ModelConfig c = parse(kMistral7B_v01);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2}));

  // Everything absent: LlamaConfig defaults; model_type inferred from architectures.
  c = parse(R"({"architectures": ["LlamaForCausalLM"]})");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 11008);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2}));

  // null num_key_value_heads / head_dim fall back; attention_bias and mlp_bias for llama.
  c = parse(R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                "num_key_value_heads": null, "head_dim": null, "attention_bias": true,
                "mlp_bias": true, "bos_token_id": null, "eos_token_id": null})");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

// ---------------------------------------------------------------------------------------------
// RoPE variants

TEST(HfConfig, RopeParametersTransformers5) {
  ModelConfig c = parse(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
      "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  // Scaling carried inside rope_parameters.
  c = parse(R"({"model_type": "llama", "max_position_embeddings": 131072,
      "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192}})");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST(HfConfig, RopeScalingLinearDynamicLegacyType) {
  ModelConfig c =
      parse(R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}})");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 2.0f);
  c = parse(R"({"model_type": "llama", "max_position_embeddings": 4096,
                "rope_scaling": {"rope_type": "dynamic", "factor": 4}})");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Dynamic);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
}

TEST(HfConfig, RopeScalingYarn) {
  ModelConfig c =
      parse(R"({"model_type": "qwen3", "head_dim": 128, "max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, (float)(0.1 * std::log(4.0) + 1.0));
  EXPECT_FLOAT_EQ(c.rope_scaling.beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.beta_slow, 1.0f);
  // Explicit attention_factor and betas; original defaults to max_position_embeddings.
  c = parse(R"({"model_type": "llama", "max_position_embeddings": 8192,
      "rope_scaling": {"type": "yarn", "factor": 2.0, "attention_factor": 0.5,
                       "beta_fast": 16, "beta_slow": 2}})");
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, 0.5f);
  EXPECT_FLOAT_EQ(c.rope_scaling.beta_fast, 16.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.beta_slow, 2.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  // mscale / mscale_all_dim ratio.
  c = parse(R"({"model_type": "llama",
      "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 0.5}})");
  const double expect = (0.1 * std::log(40.0) + 1) / (0.05 * std::log(40.0) + 1);
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, (float)expect);
}

TEST(HfConfig, RopeScalingErrors) {
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "longrope",
                                                                       "factor": 2}})"),
              HasSubstr("unsupported rope scaling type 'longrope'"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3",
                                                                       "factor": 8}})"),
              HasSubstr("'rope_scaling.low_freq_factor' is required"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear"}})"),
              HasSubstr("'rope_scaling.factor' is required"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear",
                                                                       "factor": "2"}})"),
              HasSubstr("'rope_scaling.factor' must be a number"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": 3})"),
              HasSubstr("'rope_scaling' must be an object or null"));
}

TEST(HfConfig, HugeRopeScalingFactor) {
  // Found by tests/fuzz/fuzz_hf_config (corpus regress-rope-factor-inf): a factor beyond the float
  // range became inf, and trained_context() converted inf to int64 (UB).
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"type": "dynamic",
                                                                       "factor": 2.8e77}})"),
              HasSubstr("'rope_scaling.factor' must be > 0 (and a finite float)"));
  // The largest float factor parses; trained_context() saturates instead of overflowing.
  const ModelConfig c = parse(R"({"model_type": "llama", "max_position_embeddings": 4096,
      "rope_scaling": {"type": "linear", "factor": 3.0e38}})");
  EXPECT_EQ(c.trained_context(), INT64_MAX);
  ModelConfig d;
  d.rope_scaling.type = RopeScaling::Type::Yarn;
  d.rope_scaling.factor = 4.0f;
  d.rope_scaling.original_max_position_embeddings = 8192;
  EXPECT_EQ(d.trained_context(), 32768);
}

TEST(HfConfig, RopeScalingMustBeFiniteAndPositiveAsFloats) {
  // A review of the fuzz work: the parser checked these as doubles, so a value that rounds to 0 or
  // to inf as a float passed (0 made RoPE divide by zero; inf gave inf/NaN angles).
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"type": "dynamic",
                                                                       "factor": 1e-50}})"),
              HasSubstr("'rope_scaling.factor' must be > 0 and finite as a 32-bit float"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3",
      "factor": 8, "low_freq_factor": 1, "high_freq_factor": 1e300,
      "original_max_position_embeddings": 8192}})"),
              HasSubstr("'rope_scaling.high_freq_factor' must be > 0 and finite as a 32-bit"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"type": "yarn",
                                 "factor": 4, "attention_factor": 1e300}})"),
              HasSubstr("'rope_scaling.attention_factor' must be > 0 and finite as a 32-bit"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"type": "yarn",
                                 "factor": 4, "beta_fast": 1e300}})"),
              HasSubstr("'rope_scaling.beta_fast' must be > 0 and finite as a 32-bit float"));
  // A negative beta_slow made every YaRN frequency NaN (log of a negative number), and
  // rope_theta 1 divided by log(1) = 0 (a second review).
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_scaling": {"type": "yarn",
                                 "factor": 4, "beta_fast": 32, "beta_slow": -1}})"),
              HasSubstr("'rope_scaling.beta_slow' must be > 0 and finite as a 32-bit float"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rope_theta": 1,
                              "rope_scaling": {"type": "yarn", "factor": 4}})"),
              HasSubstr("'rope_theta' must be > 1 for yarn rope scaling"));
}

// ---------------------------------------------------------------------------------------------
// AWQ

TEST(HfConfig, AwqQuantizationConfig) {
  ModelConfig c = parse(R"({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14,
      "num_key_value_heads": 2,
      "quantization_config": {"quant_method": "awq", "zero_point": true, "group_size": 128,
                              "bits": 4, "version": "GEMM", "modules_to_not_convert": null,
                              "backend": "autoawq", "do_fuse": false}})");
  EXPECT_TRUE(c.quant.enabled);
  EXPECT_EQ(c.quant.method, "awq");
  EXPECT_EQ(c.quant.bits, 4);
  EXPECT_EQ(c.quant.group_size, 128);
  EXPECT_TRUE(c.quant.zero_point);
  EXPECT_EQ(c.quant.version, "gemm");  // lower-cased
  EXPECT_TRUE(c.quant.modules_to_not_convert.empty());

  c = parse(R"({"model_type": "llama", "quantization_config": {"quant_method": "awq",
      "version": "gemv", "group_size": 64, "zero_point": false,
      "modules_to_not_convert": ["lm_head", "mlp.gate"]}})");
  EXPECT_EQ(c.quant.version, "gemv");
  EXPECT_EQ(c.quant.group_size, 64);
  EXPECT_FALSE(c.quant.zero_point);
  EXPECT_EQ(c.quant.bits, 4);
  EXPECT_THAT(c.quant.modules_to_not_convert, ElementsAre("lm_head", "mlp.gate"));

  // Defaults; exllama reads the GEMM layout.
  c = parse(R"({"model_type": "llama", "quantization_config": {"quant_method": "AWQ",
                                                                "version": "exllama"}})");
  EXPECT_EQ(c.quant.bits, 4);
  EXPECT_EQ(c.quant.group_size, 128);
  EXPECT_TRUE(c.quant.zero_point);
  EXPECT_EQ(c.quant.version, "gemm");
}

TEST(HfConfig, QuantizationErrors) {
  EXPECT_THAT(parse_error(R"({"model_type": "llama",
                              "quantization_config": {"quant_method": "gptq", "bits": 4}})"),
              HasSubstr("unsupported quantization method 'gptq'"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama",
                              "quantization_config": {"quant_method": "awq", "bits": 8}})"),
              HasSubstr("'quantization_config.bits' is 8; only 4-bit AWQ"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama",
                              "quantization_config": {"quant_method": "awq", "group_size": 0}})"),
              HasSubstr("'quantization_config.group_size' is 0"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama",
                              "quantization_config": {"quant_method": "awq", "version": "xyz"}})"),
              HasSubstr("unsupported AWQ version 'xyz'"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "quantization_config": {"bits": 4}})"),
              HasSubstr("'quantization_config.quant_method' is required"));
}

TEST(HfConfig, LegacyQuantConfigJson) {
  TempDir d;
  write_text(d.file("config.json"), kMistral7B_v01);
  write_text(d.file("quant_config.json"),
             R"({"zero_point": true, "q_group_size": 64, "w_bit": 4, "version": "GEMV"})");
  const ModelConfig c = load_hf_config(d.path());
  EXPECT_TRUE(c.quant.enabled);
  EXPECT_EQ(c.quant.group_size, 64);
  EXPECT_EQ(c.quant.bits, 4);
  EXPECT_TRUE(c.quant.zero_point);
  EXPECT_EQ(c.quant.version, "gemv");

  const QuantConfig q = parse_legacy_quant_config("{}", "q.json");
  EXPECT_TRUE(q.enabled);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_EQ(q.version, "gemm");
  EXPECT_THAT(error_of([] { parse_legacy_quant_config(R"({"w_bit": 3})", "q.json"); }),
              HasSubstr("'w_bit' is 3"));

  // config.json's quantization_config wins over the legacy file.
  TempDir d2;
  write_text(d2.file("config.json"), R"({"model_type": "llama", "quantization_config":
      {"quant_method": "awq", "group_size": 32}})");
  write_text(d2.file("quant_config.json"), R"({"q_group_size": 64})");
  EXPECT_EQ(load_hf_config(d2.path()).quant.group_size, 32);
}

TEST(HfConfig, GenerationConfigMergesEos) {
  TempDir d;
  write_text(d.file("config.json"),
             R"({"model_type": "llama", "bos_token_id": null, "eos_token_id": [5, 7]})");
  write_text(d.file("generation_config.json"),
             R"({"bos_token_id": 3, "eos_token_id": [7, 9, 5, 11], "do_sample": true})");
  const ModelConfig c = load_hf_config(d.path());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{5, 7, 9, 11}));
  EXPECT_EQ(c.bos_token_id, 3);  // filled in because config.json had none

  TempDir d2;
  write_text(d2.file("config.json"), R"({"model_type": "qwen2", "eos_token_id": 151643})");
  write_text(d2.file("generation_config.json"),
             R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643]})");
  const ModelConfig c2 = load_hf_config(d2.path());
  EXPECT_EQ(c2.eos_token_ids, (std::vector<int32_t>{151643, 151645}));
  EXPECT_EQ(c2.bos_token_id, 151643);

  TempDir d3;
  EXPECT_THAT(error_of([&] { load_hf_config(d3.path()); }), HasSubstr("no config.json"));
  write_text(d3.file("config.json"), R"({"model_type": "llama"})");
  write_text(d3.file("generation_config.json"), R"({"eos_token_id": "x"})");
  EXPECT_THAT(error_of([&] { load_hf_config(d3.path()); }), HasSubstr("eos_token_id"));
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(HfConfig, Errors) {
  EXPECT_THAT(parse_error(R"({"model_type": "gpt2"})"),
              HasSubstr("unsupported model_type 'gpt2' in test/config.json"));
  EXPECT_THAT(parse_error(R"({"architectures": ["GPT2LMHeadModel"]})"),
              HasSubstr("'model_type' is required"));
  EXPECT_THAT(parse_error("{not json"), HasSubstr("invalid JSON"));
  EXPECT_THAT(parse_error("[]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "hidden_size": "big"})"),
              HasSubstr("'hidden_size' must be an integer"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "hidden_size": 64.5})"),
              HasSubstr("'hidden_size' must be an integer"));
  EXPECT_THAT(
      parse_error(R"({"model_type": "llama", "num_attention_heads": 32,
                              "num_key_value_heads": 5})"),
      HasSubstr("'num_attention_heads' (32) is not divisible by 'num_key_value_heads' (5)"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "num_hidden_layers": 0})"),
              HasSubstr("'num_hidden_layers' must be positive (got 0)"));
  EXPECT_THAT(
      parse_error(R"({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3})"),
      HasSubstr("'hidden_size' (100) is not divisible by num_attention_heads (3)"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "rms_norm_eps": 0})"),
              HasSubstr("'rms_norm_eps' must be > 0"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "tie_word_embeddings": "yes"})"),
              HasSubstr("'tie_word_embeddings' must be true or false"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "eos_token_id": [1, "x"]})"),
              HasSubstr("'eos_token_id' must be a non-negative token id"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "hidden_act": "gelu"})"),
              HasSubstr("'hidden_act' is 'gelu'"));
  EXPECT_THAT(parse_error(R"({"model_type": "llama", "head_dim": 7, "hidden_size": 56,
                              "num_attention_heads": 8})"),
              HasSubstr("'head_dim' must be even"));
}

// ---------------------------------------------------------------------------------------------
// GGUF metadata

TEST(HfConfig, FromGgufStories260K) {
  PERFX_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  auto f = gguf::File::open(test::shared_path("models/stories260K/stories260K.gguf"));
  const ModelConfig c = config_from_gguf(*f);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.partial_rotary_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_FALSE(c.tie_word_embeddings);  // this GGUF stores output.weight
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2}));
}

TEST(HfConfig, FromGgufVocabOnlyFile) {
  PERFX_REQUIRE_SHARED("tokenizers/llama2/ggml-vocab-llama-spm.gguf");
  auto f = gguf::File::open(test::shared_path("tokenizers/llama2/ggml-vocab-llama-spm.gguf"));
  const ModelConfig c = config_from_gguf(*f);
  EXPECT_EQ(c.vocab_size, 32000);  // llama.vocab_size
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_TRUE(c.tie_word_embeddings);  // no output.weight (no tensors at all)
}

namespace {
GgufBuilder qwen_like(const std::string& arch) {
  GgufBuilder b;
  const std::string p = arch + ".";
  b.kv_str("general.architecture", arch)
      .kv_u32(p + "context_length", 40960)
      .kv_u32(p + "embedding_length", 64)
      .kv_u32(p + "block_count", 2)
      .kv_u32(p + "feed_forward_length", 128)
      .kv_u32(p + "attention.head_count", 4)
      .kv_u32(p + "attention.head_count_kv", 2)
      .kv_u32(p + "attention.key_length", 32)
      .kv_u32(p + "attention.value_length", 32)
      .kv_u32(p + "rope.dimension_count", 32)
      .kv_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f)
      .kv_f32(p + "rope.freq_base", 1e6f)
      .kv_str_array("tokenizer.ggml.tokens", {"a", "b", "c"})
      .kv_u32("tokenizer.ggml.bos_token_id", 0xffffffffu)
      .kv_u32("tokenizer.ggml.eos_token_id", 2)
      .kv_u32("tokenizer.ggml.eot_token_id", 1);
  return b;
}
}  // namespace

TEST(HfConfig, FromGgufQwen3) {
  GgufBuilder b = qwen_like("qwen3");
  b.tensor("token_embd.weight", {64, 10}, 0, std::string(64 * 10 * 4, 0))
      .tensor("blk.0.attn_q_norm.weight", {32}, 0, std::string(128, 0));
  TempDir d;
  tb::write_bytes(d.file("q.gguf"), b.build());
  auto f = gguf::File::open(d.file("q.gguf"));
  const ModelConfig c = config_from_gguf(*f);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.head_dim, 32);  // key_length, != 64 / 4
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_EQ(c.vocab_size, 10);  // embedding rows win over the token count
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.rope_interleaved);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.bos_token_id, -1);  // 0xFFFFFFFF = none
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2, 1}));
}

TEST(HfConfig, FromGgufQwen2AndScaling) {
  GgufBuilder b = qwen_like("qwen2");
  b.kv_str("qwen2.rope.scaling.type", "yarn")
      .kv_f32("qwen2.rope.scaling.factor", 4.0f)
      .kv_u32("qwen2.rope.scaling.original_context_length", 32768)
      .tensor("output.weight", {64, 3}, 0, std::string(64 * 3 * 4, 0))
      .tensor("blk.0.ffn_up.weight", {256, 2}, 12, std::string(2 * 144, 0));  // Q4_K
  TempDir d;
  tb::write_bytes(d.file("q.gguf"), b.build());
  auto f = gguf::File::open(d.file("q.gguf"));
  const ModelConfig c = config_from_gguf(*f);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, 3);  // from tokenizer.ggml.tokens
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_FLOAT_EQ(c.rope_scaling.attention_factor, (float)(0.1 * std::log(4.0) + 1));

  GgufBuilder lin = qwen_like("llama");
  lin.kv_f32("llama.rope.scale_linear", 2.0f);
  tb::write_bytes(d.file("l.gguf"), lin.build());
  const ModelConfig cl = config_from_gguf(*gguf::File::open(d.file("l.gguf")));
  EXPECT_EQ(cl.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_FLOAT_EQ(cl.rope_scaling.factor, 2.0f);
  EXPECT_TRUE(cl.rope_interleaved);
}

TEST(HfConfig, FromGgufErrors) {
  TempDir d;
  auto err = [&](const GgufBuilder& b) {
    tb::write_bytes(d.file("e.gguf"), b.build());
    auto f = gguf::File::open(d.file("e.gguf"));
    return error_of([&] { config_from_gguf(*f); });
  };
  GgufBuilder none;
  EXPECT_THAT(err(none), HasSubstr("missing metadata key 'general.architecture'"));
  GgufBuilder gpt;
  gpt.kv_str("general.architecture", "gpt2");
  EXPECT_THAT(err(gpt), HasSubstr("unsupported architecture 'gpt2'"));
  GgufBuilder missing;
  missing.kv_str("general.architecture", "llama").kv_u32("llama.context_length", 10);
  EXPECT_THAT(err(missing), HasSubstr("missing metadata key 'llama.embedding_length'"));
  GgufBuilder kv = qwen_like("qwen3");
  kv.kv_u32("qwen3.attention.head_count_kv", 3);  // duplicate key -> rejected by the reader
  tb::write_bytes(d.file("dup.gguf"), kv.build());
  EXPECT_THAT(error_of([&] { gguf::File::open(d.file("dup.gguf")); }), HasSubstr("duplicate"));
  GgufBuilder bad_kv;
  bad_kv.kv_str("general.architecture", "llama")
      .kv_u32("llama.context_length", 10)
      .kv_u32("llama.embedding_length", 64)
      .kv_u32("llama.block_count", 1)
      .kv_u32("llama.feed_forward_length", 1)
      .kv_u32("llama.attention.head_count", 4)
      .kv_u32("llama.attention.head_count_kv", 3)
      .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .kv_u32("llama.vocab_size", 5);
  EXPECT_THAT(err(bad_kv), HasSubstr("'llama.attention.head_count' (4) is not divisible by "
                                     "'llama.attention.head_count_kv' (3)"));
  GgufBuilder typ = qwen_like("llama");
  typ.kv_str("llama.rope.scaling.type", "longrope").kv_f32("llama.rope.scaling.factor", 2);
  EXPECT_THAT(err(typ), HasSubstr("unsupported value 'longrope'"));
  // GGUF's YaRN betas were read without a check (a review of the fuzz work).
  GgufBuilder betas = qwen_like("llama");
  betas.kv_str("llama.rope.scaling.type", "yarn")
      .kv_f32("llama.rope.scaling.factor", 4.0f)
      .kv_f32("llama.rope.scaling.yarn_beta_fast", 1.0f)
      .kv_f32("llama.rope.scaling.yarn_beta_slow", 32.0f);
  EXPECT_THAT(err(betas), HasSubstr("config key 'llama.rope.scaling.yarn_beta_fast' (1.000000) must "
                                    "be greater than 'llama.rope.scaling.yarn_beta_slow' (32.000000)"));
  GgufBuilder attn = qwen_like("llama");
  attn.kv_str("llama.rope.scaling.type", "yarn")
      .kv_f32("llama.rope.scaling.factor", 4.0f)
      .kv_f32("llama.rope.scaling.attn_factor", -1.0f);
  EXPECT_THAT(err(attn), HasSubstr("'llama.rope.scaling.attn_factor' must be > 0 and finite (got "
                                   "-1.000000)"));
}

// A size past int32 was accepted and truncated later: head_dim 2^40 reached the backend as 0
// ("check_kv: n_kv_heads 4 and head_dim 0 must be positive"). The parser names the key.
TEST(HfConfig, SizesPastInt32AreRefusedNamingTheKey) {
  std::string text = kLlama32_1B;
  text.replace(text.find("\"head_dim\": 64"), 14, "\"head_dim\": 1099511627776");
  EXPECT_THAT(parse_error(text), HasSubstr("test/config.json: config key 'head_dim' is "
                                           "1099511627776, out of range (at most 2147483647)"));
  text = kLlama32_1B;
  text.replace(text.find("\"num_hidden_layers\": 16"), 23, "\"num_hidden_layers\": 4294967296");
  EXPECT_THAT(parse_error(text), HasSubstr("config key 'num_hidden_layers' is 4294967296, out of"));
  // The largest int32 still parses: the model refuses it against the tensors (weights.h).
  text = kLlama32_1B;
  text.replace(text.find("\"num_hidden_layers\": 16"), 23, "\"num_hidden_layers\": 2147483647");
  EXPECT_EQ(parse(text).num_hidden_layers, 2147483647);
}

TEST(GgufConfig, SizesPastInt32AreRefusedNamingTheKey) {
  auto build = [](const std::string& key, uint64_t v) {
    GgufBuilder b;
    b.kv_str("general.architecture", "llama").kv_u32("llama.context_length", 64);
    for (const char* k : {"embedding_length", "block_count", "feed_forward_length",
                          "attention.head_count", "attention.key_length"}) {
      const std::string name = std::string("llama.") + k;
      const uint64_t def = name == "llama.block_count"            ? 2
                           : name == "llama.attention.head_count" ? 4
                                                                  : 64;
      b.kv(name, tb::kU64, tb::Bytes().u64(name == key ? v : def));
    }
    b.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).kv_u32("llama.vocab_size", 8);
    TempDir d;
    tb::write_bytes(d.file("m.gguf"), b.build());
    auto f = gguf::File::open(d.file("m.gguf"));
    return error_of([&] { config_from_gguf(*f); });
  };
  EXPECT_THAT(build("llama.attention.key_length", uint64_t(1) << 40),
              HasSubstr("config key 'llama.attention.key_length' is 1099511627776, out of range "
                        "(at most 2147483647)"));
  EXPECT_THAT(build("llama.block_count", uint64_t(1) << 32),
              HasSubstr("config key 'llama.block_count' is 4294967296, out of range"));
}
