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
/// A flag's number as a user would write it back ("1e+10", "0.5", "inf"; printf's %g).
std::string fmt_number(double v);
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
/// The prompt of `-p TEXT` or `-f FILE` (one of them; perfx::Error when both are given, or when the
/// file is missing, a folder or unreadable). A file's one trailing newline is dropped, as llama.cpp
/// does.
std::string prompt_text(const std::string& prompt, const std::string& file, bool prompt_given);
/// The ids of a prompt, by perfx::encode_prompt (the one BOS rule, shared with the server): BOS
/// when the tokenizer adds one by default (add_special), "" gives BOS alone. A double BOS is kept
/// with one "perfx: warning: ..." line on stderr. perfx::Error when nothing is left to feed (an
/// empty prompt and no BOS) and `require_tokens`.
std::vector<int32_t> prompt_ids(const Tokenizer& tok, const std::string& prompt,
                                bool add_special = true, bool require_tokens = true);

}  // namespace perfx::cli
