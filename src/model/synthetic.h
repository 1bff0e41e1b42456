// Synthetic checkpoints: random weights in the exact shapes of real models (TinyLlama-1.1B,
// Llama-2-7B, Llama-2-70B, Mistral-7B), built in memory, for benchmarks at real sizes without a
// download or a multi-gigabyte file. Named "random:SHAPE[:FORMAT]" wherever a model path is
// accepted.
#pragma once

#include <string>

#include "model/weights.h"

namespace perfx {

/// True for a model path of the form "random:...".
bool is_synthetic_path(const std::string& path);

/// Builds the checkpoint for "random:SHAPE[:FORMAT]".
/// SHAPE: tinyllama-1.1b (hidden 2048, 22 layers, 32 heads / 4 KV heads, FFN 5632), llama-2-7b
/// (4096, 32, 32 / 32, 11008), llama-2-70b (8192, 80, 64 / 8, 28672), mistral-7b (Mistral-7B-v0.1's
/// 4096, 32, 32 / 8, 14336: a GQA-4 model, built as a llama without the sliding window); vocab
/// 32000 each.
/// FORMAT: awq (default; int4 g128 in the AutoAWQ GEMV layout, fp16 embeddings, lm_head and norms),
/// f16, q8_0, q4_0 (GGUF block types for every decoder linear; fp16 embeddings and lm_head).
/// The weights are meaningless but finite, with magnitudes that keep activations in range; their
/// bytes tile a 16 MiB random pool, which costs nothing to a benchmark (every byte is still read).
/// Naming is Hugging Face's; tokenizer: none (use the bundled default model's).
/// Throws perfx::Error naming the unknown shape or format and listing the known ones.
Checkpoint synthetic_checkpoint(const std::string& path);

}  // namespace perfx
