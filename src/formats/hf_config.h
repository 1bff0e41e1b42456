// Model configuration from HF config.json (FORMATS.md §5) or GGUF metadata (FORMATS.md §4.2).
#pragma once

#include <string>

#include "perfx/model_config.h"

namespace perfx {
namespace gguf { class File; }

/// Parses config.json text. `origin` names the file in errors. Supports model_type llama, mistral,
/// qwen2, qwen3; rope_theta or rope_parameters; rope_scaling linear/dynamic/llama3/yarn; head_dim;
/// attention_bias; tie_word_embeddings; eos_token_id int or list; quantization_config (awq).
/// Throws perfx::Error for an unknown model_type, a missing required key or a wrong value type.
///
/// Details (FORMATS.md §5): absent keys take LlamaConfig defaults (hidden 4096, intermediate 11008,
/// 32 layers, 32 heads, max_position_embeddings 2048, rms_norm_eps 1e-6, rope_theta 10000, vocab
/// 32000); model_type missing -> inferred from architectures[0]; num_key_value_heads null/absent ->
/// heads; head_dim null/absent -> hidden/heads. rope_parameters (transformers 5) supplies rope_theta,
/// partial_rotary_factor and, when rope_scaling is absent, the scaling type ("default" = none). The
/// scaling type is read from rope_type or the legacy key type; yarn resolves attention_factor
/// (default 0.1·ln(factor)+1, or mscale/mscale_all_dim) and original_max_position_embeddings
/// (default max_position_embeddings). Family rules: qwen2 qkv_bias = true, o_bias = false (whatever
/// attention_bias says); qwen3 qk_norm = true; llama/mistral/qwen3 qkv_bias = o_bias =
/// attention_bias; mlp_bias only for llama; rope_interleaved = false. bos/eos default to 1/2 for
/// llama/mistral and to none for qwen; eos may be an int or a list. quantization_config:
/// quant_method must be "awq" (else "unsupported quantization method"), bits must be 4, group_size
/// > 0 or -1, version lower-cased (exllama/ipex mapped to their on-disk layout "gemm"); missing keys
/// default to bits 4, group 128, zero_point true, gemm. Values are validated (positive sizes, heads
/// divisible by kv heads, even head_dim, eps/theta > 0, hidden_act silu); errors name the key.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& origin);

/// Parses a legacy AutoAWQ (< v0.2.0) quant_config.json: keys zero_point, q_group_size, w_bit,
/// version (defaults true, 128, 4, gemm). Returns an enabled QuantConfig. Throws perfx::Error on
/// invalid JSON, a wrong value type or an unsupported value (bits != 4, unknown version).
QuantConfig parse_legacy_quant_config(const std::string& json_text, const std::string& origin);

/// Reads dir/config.json, the legacy dir/quant_config.json (if config.json has no
/// quantization_config) and merges dir/generation_config.json's eos/bos ids when present.
/// eos ids: config's first, then generation_config's new ones (order kept, no duplicates); bos from
/// generation_config only when config.json has none. Throws perfx::Error when config.json is
/// missing or any present file is invalid.
ModelConfig load_hf_config(const std::string& dir);

/// Builds the config from GGUF metadata (arch llama, mistral, qwen2, qwen3). For arch 'llama'
/// sets rope_interleaved = true (llama.cpp's Q/K permutation). Tied embeddings when output.weight is
/// absent. Throws perfx::Error for an unknown architecture or missing keys.
///
/// Keys (FORMATS.md §4.2, prefix = general.architecture): required context_length,
/// embedding_length, block_count, feed_forward_length, attention.head_count,
/// attention.layer_norm_rms_epsilon; optional attention.head_count_kv (default heads),
/// rope.freq_base (10000), attention.key_length (head_dim; default embedding/heads),
/// rope.dimension_count (rotated dims -> partial_rotary_factor), rope.scaling.{type,factor,
/// original_context_length,attn_factor} / legacy rope.scale_linear. vocab_size = rows of
/// token_embd.weight, else <arch>.vocab_size, else len(tokenizer.ggml.tokens). qkv_bias for qwen2 or
/// when blk.0.attn_q.bias exists; o_bias / mlp_bias from blk.0 bias tensors; qk_norm for qwen3 or
/// when blk.0.attn_q_norm.weight exists. bos = tokenizer.ggml.bos_token_id; eos ids =
/// eos/eot/eom_token_id (ids >= 2^31, e.g. 0xFFFFFFFF, mean "none"). Llama-3-style scaling is not
/// in the metadata: llama.cpp stores it as the rope_freqs.weight tensor (rope_scaling stays None).
ModelConfig config_from_gguf(const gguf::File& f);

}  // namespace perfx
