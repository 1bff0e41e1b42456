// Random AutoAWQ GEMM checkpoints of real model shapes (memory / speed tests).
#include "quant/random_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "perfx/status.h"
#include "quant/checkpoint_writer.h"

namespace perfx::quant {
namespace {

/// xorshift64*: fast, reproducible.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  /// Uniform in [-a, a).
  float sym(float a) { return (static_cast<float>(next() >> 40) / 16777216.0f * 2.0f - 1.0f) * a; }
};

OwnedTensor random_f16(const std::string& name, std::vector<int64_t> shape, float amp, Rng& rng) {
  OwnedTensor t;
  t.name = name;
  t.dtype = DType::F16;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  t.shape = std::move(shape);
  t.bytes.resize(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(rng.sym(amp));
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
  }
  return t;
}

OwnedTensor constant_f16(const std::string& name, int64_t n, float v) {
  std::vector<float> ones(static_cast<size_t>(n), v);
  return f16_tensor(name, ones.data(), {n});
}

void add_awq_linear(ShardedWriter& w, const std::string& base, int64_t out, int64_t in, int g,
                    Rng& rng) {
  check(in % g == 0 && out % 8 == 0, "random checkpoint: " + base + " [" + std::to_string(out) +
                                         ", " + std::to_string(in) +
                                         "] not divisible by the group size / 8");
  const int64_t G = in / g;
  std::vector<int32_t> qw(static_cast<size_t>(in * (out / 8)));
  for (auto& v : qw) v = static_cast<int32_t>(rng.next() >> 32);
  std::vector<int32_t> qz(static_cast<size_t>(G * (out / 8)));
  for (auto& v : qz) v = static_cast<int32_t>(0x88888888u ^ (rng.next() >> 32 & 0x33333333u));
  std::vector<uint16_t> sc(static_cast<size_t>(G * out));
  // |w| <= 15 · s; s ≈ 1 / (8 · sqrt(in)) keeps each output's variance near its input's.
  const float s0 = 1.0f / (8.0f * std::sqrt(static_cast<float>(in)));
  for (auto& v : sc) v = fp32_to_fp16(s0 * (1.0f + 0.25f * rng.sym(1.0f)));
  w.add(i32_tensor(base + ".qweight", qw, {in, out / 8}));
  w.add(i32_tensor(base + ".qzeros", qz, {G, out / 8}));
  w.add(f16_bits_tensor(base + ".scales", sc, {G, out}));
}

}  // namespace

size_t write_random_awq_checkpoint(const std::string& dir, const RandomCheckpointSpec& s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec))
    check(fs::is_empty(dir, ec), "random checkpoint: '" + dir + "' exists and is not empty");
  fs::create_directories(dir, ec);
  check(!ec, "random checkpoint: cannot create '" + dir + "': " + ec.message());
  check(s.hidden % s.heads == 0 && s.heads % s.kv_heads == 0, "random checkpoint: bad head counts");
  const int64_t hd = s.hidden / s.heads, kvd = s.kv_heads * hd;
  Rng rng(s.seed);
  ShardedWriter w(dir, s.max_shard_bytes);
  w.add(random_f16("model.embed_tokens.weight", {s.vocab, s.hidden}, 0.05f, rng));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.add(constant_f16(p + "input_layernorm.weight", s.hidden, 1.0f));
    w.add(constant_f16(p + "post_attention_layernorm.weight", s.hidden, 1.0f));
    add_awq_linear(w, p + "self_attn.q_proj", s.hidden, s.hidden, s.group_size, rng);
    add_awq_linear(w, p + "self_attn.k_proj", kvd, s.hidden, s.group_size, rng);
    add_awq_linear(w, p + "self_attn.v_proj", kvd, s.hidden, s.group_size, rng);
    add_awq_linear(w, p + "self_attn.o_proj", s.hidden, s.hidden, s.group_size, rng);
    add_awq_linear(w, p + "mlp.gate_proj", s.intermediate, s.hidden, s.group_size, rng);
    add_awq_linear(w, p + "mlp.up_proj", s.intermediate, s.hidden, s.group_size, rng);
    add_awq_linear(w, p + "mlp.down_proj", s.hidden, s.intermediate, s.group_size, rng);
  }
  w.add(constant_f16("model.norm.weight", s.hidden, 1.0f));
  if (!s.tie_embeddings) w.add(random_f16("lm_head.weight", {s.vocab, s.hidden}, 0.05f, rng));
  w.finish();

  nlohmann::ordered_json c;
  c["architectures"] = {"LlamaForCausalLM"};
  c["model_type"] = "llama";
  c["vocab_size"] = s.vocab;
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["max_position_embeddings"] = s.max_position;
  c["rms_norm_eps"] = 1e-5;
  c["rope_theta"] = 10000.0;
  c["tie_word_embeddings"] = s.tie_embeddings;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  c["hidden_act"] = "silu";
  c["torch_dtype"] = "float16";
  AwqConfigJson q;
  q.group_size = s.group_size;
  write_text_file(dir + "/config.json", awq_config_json(c.dump(), q));
  if (!s.tokenizer_dir.empty()) copy_tokenizer_files(s.tokenizer_dir, dir);
  return w.total_bytes();
}

}  // namespace perfx::quant
