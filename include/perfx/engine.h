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

/// The largest EngineOptions::ctx and EngineOptions::kv_cache_tokens.
inline constexpr int kMaxEngineCtx = 1 << 20;
inline constexpr int kMaxKvCacheTokens = 64 * kMaxEngineCtx;

struct EngineOptions {
  std::string
      model_path;  // HF checkpoint folder (safetensors), a .gguf file or "random:SHAPE[:FMT]"
  std::string tokenizer_path;  // HF folder whose tokenizer replaces the model's ("" = the model's
                               // own; required for "random:" models, which have none)
  std::string device = "cpu";  // backend name
  int n_threads = 0;           // <= 0: all cores
  int ctx = 0;                 // max tokens per sequence; 0: min(max_position_embeddings, 4096)
  int kv_cache_tokens = 0;     // KV capacity over all sequences; 0: see gpu_memory_utilization
  /// With kv_cache_tokens 0 on a device with its own memory (a GPU): the KV cache takes this
  /// fraction of the device's memory left after the weights and a scratch reserve (vLLM's
  /// --gpu-memory-utilization); 0 = size it for one sequence of ctx tokens (the CPU's rule).
  double gpu_memory_utilization = 0;
  int max_step_tokens = 0;  // most tokens one step carries (the server's budget); the GPU
                            // KV sizing keeps activation room for max(512, this) tokens
  int block_size = 16;      // tokens per KV block
  /// KV cache element types, llama.cpp's --cache-type-k / --cache-type-v: "f32", "f16", "q8_0";
  /// "" = the backend's activation dtype (f32 on the CPU).
  std::string cache_type_k, cache_type_v;
  /// The lm_head's weight type at load: "" = as stored; "q8_0" / "q4_0" = a float lm_head (or the
  /// embedding table it is tied to) quantized to GGUF blocks of 32 (llama-quantize's
  /// --output-tensor-type, done at load; 1.0625 / 0.5625 bytes a weight instead of fp16's 2; one
  /// already in GGUF blocks is kept).
  std::string lm_head_type;
  /// When set: called with the model's config as soon as the checkpoint is open, before the engine
  /// checks ctx against it (e.g. a sliding window) and allocates anything. A front end whose flags
  /// are not ctx (perfx bench: -p, -n) throws its own perfx::Error here, naming its flags.
  std::function<void(const ModelConfig&)> check_config;
};

using SeqId = int64_t;

class Engine {
 public:
  /// Loads model + tokenizer. Throws perfx::Error naming the file/tensor/key at fault, the memory
  /// the KV cache needs, or — before the weights load — a KV cache the backend does not store:
  /// KvTypeError naming the flags (--cache-type-k/-v or --kv-cache-dtype) and the type, or the
  /// backend's head_dim limit (CUDA: even, at most 256; OpenCL: a multiple of 4, at most 256).
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
  /// Frees the sequence's blocks (prefix-shared blocks are reference counted). Unknown ids are
  /// ignored.
  virtual void release_sequence(SeqId id) = 0;
  /// Tokens already in the sequence's cache.
  virtual int seq_len(SeqId id) const = 0;
  /// Prefix caching: for an empty sequence, attaches cached full blocks whose token contents equal
  /// the start of `tokens`; returns how many tokens are now cached (< tokens.size(), a multiple of
  /// block_size). The caller then steps only the remaining tokens.
  virtual int match_prefix(SeqId id, const std::vector<int32_t>& tokens) = 0;
  /// Free blocks needed to append n_tokens to the sequence (0 when already allocated).
  virtual int blocks_needed(SeqId id, int n_tokens) const = 0;
  /// Allocates the KV blocks the sequence needs to take n_new more tokens (vLLM's allocate_slots):
  /// true when they are now held (also when they already were), false — allocating nothing — when
  /// too few blocks are free. The scheduler's admission test; step() allocates what is missing.
  virtual bool allocate_slots(SeqId id, int n_new) = 0;
  virtual int free_blocks() const = 0;
  virtual int total_blocks() const = 0;
  virtual int block_size() const = 0;

  struct StepItem {
    SeqId seq = 0;
    std::vector<int32_t> tokens;  // appended to the sequence
    bool want_logits = true;      // a logits row for the last token
    bool all_logits = false;      // a logits row for every token (--dump-logits, perplexity)
    /// When set (and a row is wanted): the item's last row is sampled on the backend with this
    /// sampler's parameters, penalty history and next draw (Sampler::fill_row). The token is not
    /// recorded: call sampler->accept().
    Sampler* sampler = nullptr;
    bool copy_logits = false;  // copy the item's rows to the host (before sampling: raw logits)
    /// step_begin only: the item's one token (tokens left empty) is the id its sampler drew for
    /// its sequence in the step begun just before, which may not have reached the host yet (see
    /// step_begin).
    bool token_from_sample = false;
  };
  struct StepResult {
    std::vector<int32_t> tokens;  // [items.size()]: the sampled id of items with a sampler, else -1
    std::vector<float> logits;    // [rows, vocab] of the items with copy_logits, item by item
  };
  /// One forward pass over several sequences (continuous batching): appends each item's tokens to
  /// its KV cache (allocating the blocks not yet allocated), samples on the backend and copies
  /// to the host only the rows asked for. Throws perfx::Error when blocks run out (check
  /// allocate_slots first), a sequence passes ctx(), or a step_begin is outstanding.
  virtual void step(const std::vector<StepItem>& items, StepResult& out) = 0;
  /// Overlapped decode (vLLM's async scheduling, TensorRT-LLM's overlap scheduler): step_begin
  /// queues a step and may return before its samples reach the host, so that the host prepares
  /// and queues the next step while the device runs this one; step_end waits for the oldest step
  /// begun and not ended and fills `out` as step() would. step() is step_begin then step_end. At
  /// most two steps are outstanding. An item with token_from_sample takes its token from the
  /// step begun just before it, which must have sampled a row of the item's sequence; the other
  /// items carry their tokens, and sequences of that step may be left out (vLLM's async
  /// scheduling: a server's sequences end and join between steps). On a backend that samples
  /// ahead (CUDA, CPU) the ids go from the sampler to the embedding on the device (a subset or
  /// another order is gathered there). Steps only overlap when every sampler is greedy
  /// or a plain temperature draw without penalties (sampler_overlaps) and PERFX_DECODE_OVERLAP is
  /// not 0; otherwise step_begin samples at once (same tokens, no overlap). The sequences'
  /// blocks are offered to prefix caching at step_end. Throws perfx::Error as step() does, for a
  /// third outstanding step, and for a token_from_sample item whose sequence the step before did
  /// not sample. The base class (an engine without a backend: test fakes) throws "does not
  /// overlap steps".
  virtual void step_begin(const std::vector<StepItem>& items);
  /// Throws perfx::Error when no step is outstanding or the device failed.
  virtual void step_end(StepResult& out);
  /// Ends the one outstanding step and forgets it: its samples are dropped and its sequences go
  /// back to their lengths before it (a step begun past the end of generation: EOS, a stop
  /// string). Throws perfx::Error unless exactly one step is outstanding.
  virtual void step_cancel();
  /// Steps begun and not yet ended (0..2).
  virtual int steps_outstanding() const { return 0; }
  /// True when step_begin returns before the device has run the step: the backend samples ahead
  /// and queues its work (a GPU), and PERFX_DECODE_OVERLAP is not 0. A server then plans the next
  /// step while this one runs; elsewhere overlapping would only delay each token by a step.
  virtual bool overlaps_steps() const { return false; }
  /// Decode-step graphs the backend has captured so far (Backend::graphs_captured: CUDA captures
  /// one per step shape on first use, milliseconds each); 0 where none are captured. Call it from
  /// the thread that steps the engine.
  virtual uint64_t graphs_captured() const { return 0; }
  /// True when a sampler with these parameters lets steps overlap: greedy or a plain temperature
  /// draw (no top-k / top-p / min-p), and no penalties (which need the previous token on the host).
  static bool sampler_overlaps(const SamplingParams& p);

  /// step() with every wanted row copied to the host, item by item, into `logits` [rows, vocab].
  void step_logits(std::vector<StepItem> items, std::vector<float>& logits);

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
    /// finish_reason "length" because the context filled (prompt + output = ctx()) before
    /// max_tokens were generated; false when max_tokens, EOS, a stop string or on_text ended it.
    bool context_full = false;
    double prefill_seconds = 0, decode_seconds = 0;
    int prompt_tokens = 0;
  };
  /// Generates from prompt ids; on_text receives each new piece of text (never a partial UTF-8
  /// character, never text that may be the start of a stop string) and may return false to stop.
  virtual GenerateResult generate(const std::vector<int32_t>& prompt_ids, const GenerateOptions& o,
                                  const std::function<bool(const std::string&)>& on_text) = 0;
};

}  // namespace perfx
