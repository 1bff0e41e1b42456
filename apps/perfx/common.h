// Helpers shared by the perfx subcommands.
#pragma once

#include <memory>
#include <string>

#include "perfx/engine.h"
#include "perfx/tokenizer.h"

namespace perfx::cli {

/// Peak resident set size of this process in bytes (getrusage).
size_t peak_rss_bytes();
/// "1.23 GiB"-style size.
std::string human_bytes(size_t b);
/// Loads only the tokenizer of a model path (HF folder or .gguf), without the weights.
std::unique_ptr<Tokenizer> load_tokenizer_only(const std::string& path);
/// Encodes a prompt as `perfx run` does: BOS when the tokenizer adds one by default; "" gives BOS
/// alone (perfx::Error when the model has no BOS).
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& prompt);

}  // namespace perfx::cli
