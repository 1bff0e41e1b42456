// Subcommands register themselves (one file per subcommand); main.cpp builds the CLI from the registry.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "perfx/engine.h"
#include "perfx/status.h"

namespace perfx::cli {

/// setup(app) adds the subcommand to `app` (app.add_subcommand), its options and its callback.
/// Callbacks report failures by throwing perfx::Error; main prints "perfx: error: <what>" and exits 1.
struct Subcommand {
  std::string name;
  int order;  // position in --help
  std::function<void(CLI::App&)> setup;
};

std::vector<Subcommand>& registry();

struct Register {
  Register(std::string name, int order, std::function<void(CLI::App&)> setup) {
    registry().push_back({std::move(name), order, std::move(setup)});
  }
};

/// Adds --max-alloc BYTES (e.g. 1GiB, 512MiB): the largest single buffer an OpenCL device backend
/// may allocate, below the device's own limit; weights larger than it are split over several
/// buffers. Passed to the backend as PERFX_OPENCL_MAX_ALLOC, which validates it; other backends
/// ignore it.
inline void add_max_alloc_option(CLI::App* sub) {
  sub->add_option_function<std::string>(
      "--max-alloc", [](const std::string& v) { ::setenv("PERFX_OPENCL_MAX_ALLOC", v.c_str(), 1); },
      "OpenCL: largest single device buffer, e.g. 1GiB (bigger weights are split)");
}

/// --lm-head-type q8_0|q4_0: the lm_head quantized to GGUF blocks at load (EngineOptions::lm_head_type).
inline void add_lm_head_type_option(CLI::App* sub, std::string* type) {
  sub->add_option("--lm-head-type", *type,
                  "q8_0 or q4_0: quantize a float lm_head to GGUF blocks of 32 at load (about a half or "
                  "a quarter of its bytes, which decode reads every token; llama-quantize's "
                  "--output-tensor-type). Default: as stored")
      ->check(CLI::IsMember({"q8_0", "q4_0"}));
}

/// --cache-type-k / --cache-type-v (llama.cpp's names) and --kv-cache-dtype (vLLM's: one type for
/// both; "auto" = the default). Values: f32, f16, bf16, q8_0 (int8 is taken for q8_0); the engine
/// checks them, the backend refuses the ones it cannot store with a message naming the flag.
/// --kv-cache-dtype excludes the other two (CLI11 refuses the combination).
inline void add_kv_cache_type_options(CLI::App* sub, std::string* k, std::string* v) {
  const std::string dflt = " (default: the activation dtype: f32 on the CPU, f16/bf16 on GPUs)";
  auto* ok = sub->add_option("--cache-type-k", *k, "KV cache type of K: f32, f16, bf16, q8_0" + dflt);
  auto* ov = sub->add_option("--cache-type-v", *v, "KV cache type of V: f32, f16, bf16, q8_0" + dflt);
  sub->add_option_function<std::string>(
         "--kv-cache-dtype",
         [k, v](const std::string& s) {
           if (s != "auto" && s != "f32" && s != "f16" && s != "bf16" && s != "q8_0" && s != "int8")
             throw CLI::ValidationError("--kv-cache-dtype",
                                        "must be auto, f16, bf16, f32, q8_0 or int8, got '" + s + "'");
           *k = *v = s == "int8" ? "q8_0" : s == "auto" ? "" : s;
         },
         "KV cache type of K and V: auto, f16, bf16, f32, q8_0 (int8) (vLLM's flag)")
      ->excludes(ok)
      ->excludes(ov);
}

/// The model used when -m is omitted: models/default in the source tree (or $PERFX_DEFAULT_MODEL).
std::string default_model_path();

/// An option's `->each` check that refuses a value given but empty (`-x ""`, e.g. an unset shell
/// variable) while parsing: perfx::Error with `message`, one `perfx: error:` line.
inline std::function<void(const std::string&)> refuse_empty(std::string message) {
  return [message = std::move(message)](const std::string& v) {
    if (v.empty()) throw Error(message);
  };
}

/// Adds -m/--model into `model`, which keeps its value when the flag is omitted (the subcommands
/// then take default_model_path(): "" means it, or serve presets it). A value given but empty
/// (`-m ""`, e.g. an unset shell variable) is refused while parsing (perfx::Error naming the
/// flag: one `perfx: error:` line) instead of silently running the default model.
inline CLI::Option* add_model_option(CLI::App* sub, std::string* model, const std::string& help) {
  return sub->add_option("-m,--model", *model, help)
      ->each(refuse_empty("-m/--model is empty; give a model path, or omit -m for models/default"));
}

/// The type flags of every subcommand that loads a model (run, serve, bench, perplexity):
/// --cache-type-k / -v and --kv-cache-dtype (add_kv_cache_type_options), --lm-head-type.
struct TypeFlags {
  std::string cache_type_k, cache_type_v;  // "" = the activation dtype (f32 on the CPU)
  std::string lm_head_type;                // "" = as stored
  /// Copies them into the engine's options.
  void apply(EngineOptions& eo) const {
    eo.cache_type_k = cache_type_k;
    eo.cache_type_v = cache_type_v;
    eo.lm_head_type = lm_head_type;
  }
};
inline void add_type_options(CLI::App* sub, TypeFlags* t) {
  add_kv_cache_type_options(sub, &t->cache_type_k, &t->cache_type_v);
  add_lm_head_type_option(sub, &t->lm_head_type);
}

}  // namespace perfx::cli
