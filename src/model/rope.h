// RoPE inverse frequencies for every scaling type (HF transformers modeling_rope_utils.py;
// FORMATS.md §5.2–5.3; llama3: Meta's Llama 3.1 release, "llama3" rope_type).
#pragma once

#include "backend/backend.h"
#include "perfx/model_config.h"

namespace perfx {

/// RoPE parameters for `cfg`. seq_len is the current sequence length, used only by "dynamic" NTK
/// scaling (which changes the base once seq_len > max_position_embeddings).
RopeParams make_rope_params(const ModelConfig& cfg, int64_t seq_len);

}  // namespace perfx
