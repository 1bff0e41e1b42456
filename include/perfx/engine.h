// The Engine: a loaded model (weights on a backend), its tokenizer and a paged KV cache. The CLI's
// `run` and the server's scheduler drive the same Engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "perfx/sampling.h"
#include "perfx/tokenizer.h"

namespace perfx {

struct ModelConfig;

struct EngineOptions {
  std::string model_path;        // HF checkpoint folder (safetensors) or a .gguf file
  std::string device = "cpu";    // backend name
  int n_threads = 0;             // <= 0: all cores
  int ctx = 0;                   // max tokens per sequence; 0: min(max_position_embeddings, 4096)
  int kv_cache_tokens = 0;       // KV capacity over all sequences; 0: ctx
  int block_size = 16;           // tokens per KV block
};

using SeqId = int64_t;

class Engine {
 public:
  /// Loads model + tokenizer. Throws perfx::Error naming the file/tensor/key at fault.
  static std::unique_ptr<Engine> load(const EngineOptions& opts);
  virtual ~Engine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  /// The backend the model runs on ("cpu", "cuda:0", ...).
  virtual std::string device() const = 0;
  virtual int ctx() const = 0;
  /// Bytes of weights held by the backend.
  virtual size_t weight_bytes() const = 0;
  virtual std::string model_name() const = 0;
  /// The token ids that end generation: the config's eos_token_id(s), then the tokenizer's EOS ids
  /// not already listed (no duplicates). Computed on each call: cache it in per-token paths.
  std::vector<int32_t> eos_ids() const;

  // ---- sequences over the paged KV cache
  virtual SeqId create_sequence() = 0;
  /// Frees the sequence's blocks (prefix-shared blocks are reference counted). Unknown ids are ignored.
  virtual void release_sequence(SeqId id) = 0;
  /// Tokens already in the sequence's cache.
  virtual int seq_len(SeqId id) const = 0;
  /// Prefix caching: for an empty sequence, attaches cached full blocks whose token contents equal
  /// the start of `tokens`; returns how many tokens are now cached (< tokens.size(), a multiple of
  /// block_size). The caller then steps only the remaining tokens.
  virtual int match_prefix(SeqId id, const std::vector<int32_t>& tokens) = 0;
  /// Free blocks needed to append n_tokens to the sequence.
  virtual int blocks_needed(SeqId id, int n_tokens) const = 0;
  virtual int free_blocks() const = 0;
  virtual int total_blocks() const = 0;
  virtual int block_size() const = 0;

  struct StepItem {
    SeqId seq = 0;
    std::vector<int32_t> tokens;  // appended to the sequence
    bool want_logits = true;      // logits of the last token
    bool all_logits = false;      // logits of every token (for --dump-logits, perplexity)
  };
  /// One forward pass over several sequences (continuous batching): appends each item's tokens to
  /// its KV cache and writes the wanted logits rows, item by item, into `logits` [rows, vocab].
  /// Throws perfx::Error when blocks run out (check blocks_needed) or a sequence passes ctx().
  virtual void step(const std::vector<StepItem>& items, std::vector<float>& logits) = 0;

  /// Forwards `ids` as one fresh sequence and writes the logits of every token into `logits`
  /// (fp32 [ids.size(), vocab], row-major); the sequence is released afterwards, also when step()
  /// throws (its perfx::Error passes through). For --dump-logits and perplexity windows.
  void prompt_logits(const std::vector<int32_t>& ids, std::vector<float>& logits);

  // ---- convenience: one sequence, prefill then decode
  struct GenerateOptions {
    int max_tokens = 128;
    SamplingParams sampling;
    std::vector<std::string> stop;  // stop strings (not included in the output)
    bool ignore_eos = false;
  };
  struct GenerateResult {
    std::vector<int32_t> output_ids;
    std::string text;
    std::string finish_reason;  // "stop" | "length"
    double prefill_seconds = 0, decode_seconds = 0;
    int prompt_tokens = 0;
  };
  /// Generates from prompt ids; on_text receives each new piece of text (never a partial UTF-8
  /// character, never text that may be the start of a stop string) and may return false to stop.
  virtual GenerateResult generate(const std::vector<int32_t>& prompt_ids, const GenerateOptions& o,
                                  const std::function<bool(const std::string&)>& on_text) = 0;
};

}  // namespace perfx
