// Model configuration from HF config.json (FORMATS.md §5) or GGUF metadata (FORMATS.md §4.2).
#pragma once

#include <string>

#include "model/config.h"

namespace perfx {
namespace gguf { class File; }

/// Parses config.json text. `origin` names the file in errors. Supports model_type llama, mistral,
/// qwen2, qwen3; rope_theta or rope_parameters; rope_scaling linear/dynamic/llama3/yarn; head_dim;
/// attention_bias; tie_word_embeddings; eos_token_id int or list; quantization_config (awq).
/// Throws perfx::Error for an unknown model_type, a missing required key or a wrong value type.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& origin);

/// Reads dir/config.json, the legacy dir/quant_config.json (if config.json has no
/// quantization_config) and merges dir/generation_config.json's eos/bos ids when present.
ModelConfig load_hf_config(const std::string& dir);

/// Builds the config from GGUF metadata (arch llama, mistral, qwen2, qwen3). For arch 'llama'
/// sets rope_interleaved = true (llama.cpp's Q/K permutation). Tied embeddings when output.weight is
/// absent. Throws perfx::Error for an unknown architecture or missing keys.
ModelConfig config_from_gguf(const gguf::File& f);

}  // namespace perfx
