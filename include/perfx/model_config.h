// One configuration struct for every Llama-family model (llama, mistral, qwen2, qwen3), whatever file it
// came from (HF config.json or GGUF metadata). Public and header-only: formats/ fills it, model/ and the
// server read it, and no module includes another's internals for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace perfx {

/// RoPE frequency scaling (FORMATS.md §5.3; transformers modeling_rope_utils.py).
struct RopeScaling {
  enum class Type { None, Linear, Dynamic, Llama3, Yarn };
  Type type = Type::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_max_position_embeddings = 0;  // llama3 / yarn
  float attention_factor = 1.0f;  // yarn (resolved at parse time)
  float beta_fast = 32.0f, beta_slow = 1.0f;  // yarn
};

/// AWQ quantization_config (FORMATS.md §2.1). `enabled` false for plain checkpoints.
struct QuantConfig {
  bool enabled = false;
  std::string method = "awq";
  int bits = 4;
  int group_size = 128;
  bool zero_point = true;
  std::string version = "gemm";  // lower-cased: gemm | gemv
  std::vector<std::string> modules_to_not_convert;
};

struct ModelConfig {
  std::string model_type = "llama";  // llama | mistral | qwen2 | qwen3
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 128;
  int64_t max_position_embeddings = 2048;
  /// Sliding-window attention (Mistral v0.1: 4096): a query at position p sees keys in (p − W, p].
  /// 0 = full attention. The engine does not implement the window and refuses contexts above it.
  int64_t sliding_window = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float partial_rotary_factor = 1.0f;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;   // qwen2 always; llama/qwen3 when attention_bias
  bool o_bias = false;     // attention_bias (llama); never for qwen2
  bool mlp_bias = false;
  bool qk_norm = false;    // qwen3
  /// true: RoPE rotates adjacent pairs (2i, 2i+1) — GGUF 'llama' arch weights keep llama.cpp's Q/K
  /// row permutation (FORMATS.md §4.3). false: HF half-split rotate_half.
  bool rope_interleaved = false;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  QuantConfig quant;

  /// The context length the model was trained for: max_position_embeddings, or longer when RoPE
  /// scaling extends it (factor × original_max_position_embeddings, or × max_position_embeddings
  /// when the original is not given).
  int64_t trained_context() const {
    if (rope_scaling.type == RopeScaling::Type::None || !(rope_scaling.factor > 1.0f))
      return max_position_embeddings;
    const int64_t base = rope_scaling.original_max_position_embeddings > 0
                             ? rope_scaling.original_max_position_embeddings
                             : max_position_embeddings;
    // Saturates at INT64_MAX: a huge factor must not overflow the conversion (UB; found by
    // tests/fuzz/fuzz_hf_config with factor 2.8e77, which the float made inf).
    const double scaled_d = (double)base * (double)rope_scaling.factor;
    if (!(scaled_d < 9.2e18)) return INT64_MAX;
    const int64_t scaled = (int64_t)scaled_d;
    return scaled > max_position_embeddings ? scaled : max_position_embeddings;
  }
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

}  // namespace perfx
