// Helpers shared by the perfx subcommands.
#pragma once

#include <memory>
#include <string>

#include "perfx/engine.h"
#include "perfx/tokenizer.h"

namespace perfx::cli {

/// The tokenizer folder for EngineOptions::tokenizer_path: the bundled default model's for a
/// synthetic "random:" model (which has none), else "" (the model's own).
std::string tokenizer_override(const std::string& model_path);
/// Peak resident set size of this process in bytes (getrusage).
size_t peak_rss_bytes();
/// "1.23 GiB"-style size.
std::string human_bytes(size_t b);
/// Loads only the tokenizer of a model path (HF folder or .gguf), without the weights.
std::unique_ptr<Tokenizer> load_tokenizer_only(const std::string& path);
/// -t above the CPUs this process may use (available_cpus()) works but runs much slower (threads
/// take turns on the cores): prints one "perfx: warning: ..." line to stderr then. Values above
/// 1024 are refused by the engine.
void warn_if_oversubscribed(int threads);
/// When the engine's context is longer than the model's trained context, prints one line
/// "perfx: warning: context N exceeds the model's trained context M; output past M tokens may
/// degrade<note>" to stderr and returns true.
bool warn_past_trained_context(Engine& engine, const std::string& note = "");
/// Encodes a prompt as `perfx run` does: BOS when the tokenizer adds one by default; "" gives BOS
/// alone (perfx::Error when the model has no BOS).
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& prompt);

}  // namespace perfx::cli
