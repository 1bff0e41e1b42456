// A deterministic stand-in for the Engine in server tests: the real paged-KV BlockManager (so
// prefix caching, block accounting and preemption are exercised for real), a character tokenizer,
// and a "model" whose next token is a hash of the sequence's whole history, so a result that mixes
// up sequences or positions is caught. Optional per-step sleep and failure injection.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "perfx/model_config.h"
#include "perfx/engine.h"
#include "runtime/kv_cache.h"

namespace perfx::test {

/// Ids: 0 "<s>", 1 "</s>", then one id per character of kChars.
class FakeTokenizer : public Tokenizer {
 public:
  static constexpr const char* kChars =
      "abcdefghijklmnopqrstuvwxyz .,!?ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t vocab_size() const override;
  int32_t bos_id() const override { return 0; }
  std::vector<int32_t> eos_ids() const override { return {1}; }
  bool add_bos_by_default() const override { return true; }
  bool is_special(int32_t id) const override { return id < 2; }
  std::string id_to_token(int32_t id) const override;
  std::string bos_token() const override { return "<s>"; }
  std::string eos_token() const override { return "</s>"; }
  std::string chat_template() const override { return ""; }
};

struct FakeEngineOptions {
  int ctx = 256;
  int kv_tokens = 4096;
  int block_size = 16;
  int step_sleep_us = 0;  // simulated compute time per step
  int match_prefix_sleep_us = 0;  // simulated prefix-cache lookup time (widens admission races)
  int eos_after = 0;      // > 0: emit EOS once a sequence has this many tokens
  std::vector<int32_t> config_eos = {1};  // the config's eos_token_id(s); the tokenizer's is 1
  /// Overlapped steps (Engine::overlaps_steps): step_begin / step_end with token_from_sample, as
  /// the server's scheduler drives a device engine.
  bool overlap = false;
  /// A real tokenizer to use instead of FakeTokenizer (not owned; it must outlive the engine).
  const Tokenizer* tokenizer = nullptr;
  /// The model, when set: writes the next-token logits after `history` into `row` (zeros, one per
  /// vocabulary entry). Default: the history hash (next_token) at 12, its successor at 1.
  std::function<void(const std::vector<int32_t>& history, std::vector<float>& row)> model;
};

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(FakeEngineOptions o = {});

  /// The model's next token after `history` (what greedy decoding picks).
  static int32_t next_token(const std::vector<int32_t>& history, int eos_after);
  /// What greedy decoding produces alone for `prompt` (up to max_tokens, stopping at EOS).
  std::vector<int32_t> solo(const std::vector<int32_t>& prompt, int max_tokens) const;

  const ModelConfig& config() const override { return cfg_; }
  const Tokenizer& tokenizer() const override { return o_.tokenizer ? *o_.tokenizer : tok_; }
  std::string device() const override { return "fake"; }
  int ctx() const override { return o_.ctx; }
  size_t weight_bytes() const override { return 0; }
  std::string model_name() const override { return "fake-model"; }
  SeqId create_sequence() override;
  void release_sequence(SeqId id) override;
  int seq_len(SeqId id) const override;
  int match_prefix(SeqId id, const std::vector<int32_t>& tokens) override;
  int blocks_needed(SeqId id, int n_tokens) const override;
  int free_blocks() const override;
  int total_blocks() const override;
  int block_size() const override { return o_.block_size; }
  bool allocate_slots(SeqId id, int n_new) override;
  /// Rows are the fake model's logits; an item with a sampler is sampled from its row on the host
  /// (Sampler::sample), as a backend's sample op would.
  void step(const std::vector<StepItem>& items, StepResult& out) override;
  /// With FakeEngineOptions::overlap: the step runs at once (its token_from_sample items take the
  /// step before's ids); step_end hands its results out in order.
  void step_begin(const std::vector<StepItem>& items) override;
  void step_end(StepResult& out) override;
  int steps_outstanding() const override { return (int)pending_.size(); }
  bool overlaps_steps() const override { return o_.overlap; }
  GenerateResult generate(const std::vector<int32_t>&, const GenerateOptions&,
                          const std::function<bool(const std::string&)>&) override;

  // ---- observations for tests
  struct StepRecord {
    std::vector<int> tokens_per_item;
  };
  std::vector<StepRecord> steps() const;
  int live_sequences() const;
  /// Makes the next `n` steps throw.
  void fail_next_steps(int n) { fail_steps_ = n; }
  /// Makes the next `n` step_end calls throw (forgetting every outstanding step).
  void fail_next_step_ends(int n) { fail_step_ends_ = n; }
  /// release_sequence calls for a sequence an outstanding step still held (a scheduler bug).
  int released_in_flight() const { return released_in_flight_; }
  /// The most steps outstanding at once (2 when steps overlapped).
  int max_outstanding() const { return max_outstanding_; }

 private:
  struct Pending {
    std::vector<SeqId> seqs;
    StepResult result;
  };
  void run(const std::vector<StepItem>& items, StepResult& out);
  std::deque<Pending> pending_;  // steps begun and not ended (scheduler thread only)
  std::atomic<int> released_in_flight_{0}, max_outstanding_{0};
  FakeEngineOptions o_;
  ModelConfig cfg_;
  FakeTokenizer tok_;
  mutable std::mutex mu_;
  BlockManager blocks_;
  std::map<SeqId, std::vector<int32_t>> history_;
  SeqId next_ = 1;
  std::vector<StepRecord> steps_;
  std::atomic<int> fail_steps_{0}, fail_step_ends_{0};
};

}  // namespace perfx::test
