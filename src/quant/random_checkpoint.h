// A random-weight AutoAWQ GEMM checkpoint of a given Llama shape, written with our own checkpoint
// writer (for memory and speed tests at real model sizes, e.g. Llama-2-7B, without downloading
// one). The weights are meaningless; the layout, dtypes and sizes are those of a real AutoAWQ
// w4 g128 checkpoint (FORMATS.md §2.1–§2.3).
#pragma once

#include <cstdint>
#include <string>

namespace perfx::quant {

struct RandomCheckpointSpec {
  int64_t vocab = 32000, hidden = 4096, intermediate = 11008, layers = 32, heads = 32,
          kv_heads = 32, max_position = 4096;
  int group_size = 128;
  bool tie_embeddings = false;
  uint64_t seed = 1;
  std::string tokenizer_dir;  // tokenizer files copied from here ("" = none)
  size_t max_shard_bytes = size_t(1) << 30;
};

/// Writes the checkpoint into `dir` (created; must be empty): config.json (model_type llama,
/// fp16, quantization_config awq/gemm), embed_tokens / lm_head / norms in F16, every decoder
/// linear as qweight/qzeros/scales. Returns the tensor bytes written. Throws perfx::Error on I/O
/// failure or a shape not divisible by the group size / 8.
size_t write_random_awq_checkpoint(const std::string& dir, const RandomCheckpointSpec& spec);

}  // namespace perfx::quant
