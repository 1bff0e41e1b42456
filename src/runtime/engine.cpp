// Engine: model + tokenizer + paged KV cache on one backend.
#include "perfx/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <exception>
#include <new>
#include <string>

#include "backend/backend.h"
#include "formats/gguf.h"
#include "model/llama.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "perfx/status.h"
#include "runtime/kv_cache.h"
#include "runtime/stop_strings.h"

namespace perfx {
namespace {

constexpr int kPrefillChunk = 512;  // tokens per forward during generate()'s prefill

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// Releases a sequence when the scope ends, however it ends.
struct SequenceRelease {
  Engine& engine;
  SeqId seq;
  ~SequenceRelease() { engine.release_sequence(seq); }
};

class EngineImpl : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& o) {
    check(o.n_threads >= 0 && o.n_threads <= 1024,
          "thread count " + std::to_string(o.n_threads) + " is out of range (0..1024)");
    check(o.ctx >= 0 && o.ctx <= kMaxEngineCtx, "context size " + std::to_string(o.ctx) +
                                                    " is out of range (0 = model default, or 1.." +
                                                    std::to_string(kMaxEngineCtx) + ")");
    check(o.kv_cache_tokens >= 0 && o.kv_cache_tokens <= kMaxKvCacheTokens,
          "--kv-cache-tokens " + std::to_string(o.kv_cache_tokens) +
              " is out of range (0 = default, or up to " + std::to_string(kMaxKvCacheTokens) + ")");
    check(o.block_size > 0 && o.block_size <= 4096, "KV block size must be 1..4096");
    check(o.gpu_memory_utilization >= 0 && o.gpu_memory_utilization <= 1,
          "GPU memory utilization must be in (0, 1], got " +
              std::to_string(o.gpu_memory_utilization));
    ck_ = open_checkpoint(o.model_path);
    if (o.check_config) o.check_config(ck_.config);
    backend_ = create_backend(o.device, o.n_threads);
    KvCacheTypes kvt;
    auto kv_type = [](const std::string& s, const char* flag) -> std::optional<DType> {
      if (s.empty()) return std::nullopt;
      if (s == "f32") return DType::F32;
      if (s == "f16") return DType::F16;
      if (s == "bf16") return DType::BF16;
      if (s == "q8_0") return DType::Q8_0;
      throw Error(std::string(flag) + " must be f32, f16, bf16 or q8_0, got '" + s + "'");
    };
    kvt.k = kv_type(o.cache_type_k, "--cache-type-k");
    kvt.v = kv_type(o.cache_type_v, "--cache-type-v");
    // A cache the backend does not store is the flags' (or the model's) problem: say so before
    // the weights load and the KV cache is sized, so it never costs a load or reads as a shortage.
    backend_->check_kv((int)ck_.config.num_key_value_heads, (int)ck_.config.head_dim, kvt);
    ModelOptions mo;
    if (o.lm_head_type == "q8_0")
      mo.lm_head_type = DType::Q8_0;
    else if (o.lm_head_type == "q4_0")
      mo.lm_head_type = DType::Q4_0;
    else
      check(o.lm_head_type.empty(),
            "--lm-head-type must be q8_0 or q4_0 (or unset: as stored), got '" + o.lm_head_type +
                "'");
    model_ = std::make_unique<LlamaModel>(ck_, *backend_, mo);
    if (!o.tokenizer_path.empty())
      tokenizer_ = Tokenizer::from_hf_dir(o.tokenizer_path);
    else if (ck_.naming == TensorNaming::Gguf)
      tokenizer_ = Tokenizer::from_gguf(*ck_.gguf);
    else if (is_synthetic_path(o.model_path))
      throw Error("model '" + o.model_path +
                  "' has no tokenizer: give one (EngineOptions::tokenizer_path)");
    else
      tokenizer_ = Tokenizer::from_hf_dir(o.model_path);
    const ModelConfig& c = model_->config();
    check(tokenizer_->vocab_size() <= c.vocab_size,
          "tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
              " tokens but the model only " + std::to_string(c.vocab_size));
    ctx_ = o.ctx > 0 ? o.ctx : (int)std::min<int64_t>(c.max_position_embeddings, 4096);
    PERFX_CHECK(c.sliding_window <= 0 || ctx_ <= c.sliding_window,
                "context " + std::to_string(ctx_) + " exceeds the model's sliding_window " +
                    std::to_string(c.sliding_window) +
                    " (config.json); attention past the window is not implemented, so use -c <= " +
                    std::to_string(c.sliding_window));
    // Like vLLM: the cache must hold at least one sequence of the full context, else a long
    // request could never finish (it would be cut short or preempted forever).
    PERFX_CHECK(o.kv_cache_tokens == 0 || o.kv_cache_tokens >= ctx_,
                "a KV cache of " + std::to_string(o.kv_cache_tokens) +
                    " tokens cannot hold one sequence of the context size " + std::to_string(ctx_) +
                    ": give --kv-cache-tokens >= " + std::to_string(ctx_) + " or a smaller -c");
    int kv_tokens = o.kv_cache_tokens > 0 ? o.kv_cache_tokens : ctx_;
    size_t free_b = 0, total_b = 0;
    if (o.kv_cache_tokens == 0 && o.gpu_memory_utilization > 0 &&
        backend_->device_memory(&free_b, &total_b)) {
      // vLLM's rule: weights + activations + KV within utilization · total; activations get a
      // reserve (the scratch of the largest step, at least 512 tokens; logits for 512 rows, one per
      // sequence; plus 1 GiB for workspaces).
      const size_t act = dtype_block_bytes(backend_->act_dtype());
      const size_t step = (size_t)std::max(512, o.max_step_tokens);
      const size_t scratch = step * (size_t)(6 * c.hidden_size + 4 * c.intermediate_size) * act +
                             (size_t)512 * (size_t)c.vocab_size * 4 + (size_t(1) << 30);
      const double budget =
          o.gpu_memory_utilization * (double)total_b - (double)(total_b - free_b) - (double)scratch;
      const double per_token =
          (double)c.num_hidden_layers *
          backend_->kv_bytes_per_token((int)c.num_key_value_heads, (int)c.head_dim, kvt);
      const double fit = budget / per_token;
      PERFX_CHECK(fit >= ctx_,
                  "GPU memory: the KV cache for one sequence of " + std::to_string(ctx_) +
                      " tokens needs " + std::to_string((size_t)(per_token * ctx_) >> 20) +
                      " MiB, but only " + std::to_string(budget > 0 ? (size_t)budget >> 20 : 0) +
                      " MiB are left within the GPU memory utilization " +
                      std::to_string(o.gpu_memory_utilization) +
                      " (lower -c or raise it; on CUDA, PERFX_CUDA_DENSE_WEIGHTS=0 drops the "
                      "dequantized weight copies)");
      kv_tokens = (int)std::min<double>(fit, (double)kMaxKvCacheTokens);
    }
    const int n_blocks = (kv_tokens + o.block_size - 1) / o.block_size;
    blocks_ = std::make_unique<BlockManager>(n_blocks, o.block_size);
    // check_kv above took the types and shape, so what create_kv throws now is about memory.
    const std::string cannot = "cannot allocate the KV cache (" +
                               std::to_string((int64_t)n_blocks * o.block_size) + " tokens): ";
    try {
      kv_ = backend_->create_kv((int)c.num_hidden_layers, n_blocks, o.block_size,
                                (int)c.num_key_value_heads, (int)c.head_dim, kvt);
    } catch (const std::bad_alloc&) {
      throw Error(cannot + "out of memory; " + kLowerMemoryAdvice);
    } catch (const Error& e) {
      throw Error(cannot + e.what());
    }
    eos_ = eos_ids();
    if (const char* ov = std::getenv("PERFX_DECODE_OVERLAP"); ov && *ov) {
      const std::string v = ov;
      check(v == "0" || v == "1" || v == "2",
            "PERFX_DECODE_OVERLAP must be 0, 1 or 2, got '" + v + "'");
      overlap_ = v != "0";
      overlap_everywhere_ = v == "2";
    }
    // A device backend holds its own copy of the weights: the host checkpoint can go (mmapped
    // pages, a synthetic model's memory), keeping the host's resident memory small.
    if (!backend_->reads_host_weights()) {
      ck_.gguf = nullptr;
      ck_.source.reset();
    }
    std::string p = o.model_path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    name_ = p.substr(p.find_last_of('/') == std::string::npos ? 0 : p.find_last_of('/') + 1);
  }

  const ModelConfig& config() const override { return model_->config(); }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  std::string device() const override { return backend_->name(); }
  int ctx() const override { return ctx_; }
  size_t weight_bytes() const override { return model_->weight_bytes(); }
  std::string model_name() const override { return name_; }

  SeqId create_sequence() override {
    const SeqId id = next_seq_++;
    blocks_->add_sequence(id);
    return id;
  }
  void release_sequence(SeqId id) override { blocks_->remove_sequence(id); }
  int seq_len(SeqId id) const override { return blocks_->seq_len(id); }
  int match_prefix(SeqId id, const std::vector<int32_t>& tokens) override {
    return blocks_->match_prefix(id, tokens);
  }
  int blocks_needed(SeqId id, int n) const override { return blocks_->blocks_needed(id, n); }
  int free_blocks() const override { return blocks_->free_blocks(); }
  int total_blocks() const override { return blocks_->total_blocks(); }
  int block_size() const override { return blocks_->block_size(); }

  bool allocate_slots(SeqId id, int n_new) override {
    PERFX_CHECK(blocks_->has_sequence(id),
                "allocate_slots: unknown sequence " + std::to_string(id));
    return blocks_->allocate(id, n_new);
  }

  void step(const std::vector<StepItem>& items, StepResult& out) override {
    PERFX_CHECK(pending_.empty(), "step: " + std::to_string(pending_.size()) +
                                      " step_begin still outstanding (call step_end first)");
    begin(items, /*may_overlap=*/false);
    step_end(out);
  }

  void step_begin(const std::vector<StepItem>& items) override { begin(items, overlap_); }

  void step_end(StepResult& out) override {
    PERFX_CHECK(!pending_.empty(), "step_end: no step is outstanding");
    Pending& p = pending_.front();
    if (p.ahead) {
      std::vector<int32_t> ids(p.row_item.size());
      try {
        backend_->sample_end(ids.data());
      } catch (...) {
        p.ahead = false;    // the backend dropped this draw
        abandon_pending();  // the device failed: no step is left to end
        throw;
      }
      for (size_t r = 0; r < ids.size(); ++r) p.result.tokens[p.row_item[r]] = ids[r];
    }
    // The next step's placeholders (token_from_sample) are these samples.
    if (pending_.size() > 1) {
      const Pending& nx = pending_[1];
      for (size_t j = 0; j < nx.seqs.size(); ++j)
        if (nx.fed_item[j] >= 0 && blocks_->has_sequence(nx.seqs[j]))
          blocks_->set_token(nx.seqs[j], nx.start_len[j], p.result.tokens[(size_t)nx.fed_item[j]]);
    }
    // K/V written (or queued before any step that could read them): the step's full blocks may
    // be shared now.
    for (size_t i = 0; i < p.seqs.size(); ++i)
      if (blocks_->has_sequence(p.seqs[i])) blocks_->commit(p.seqs[i], p.end_len[i]);
    out = std::move(p.result);
    pending_.pop_front();
  }

  void step_cancel() override {
    PERFX_CHECK(pending_.size() == 1, "step_cancel: " + std::to_string(pending_.size()) +
                                          " steps are outstanding (cancel needs exactly one)");
    if (const std::exception_ptr e = abandon_pending()) std::rethrow_exception(e);
  }

  int steps_outstanding() const override { return (int)pending_.size(); }
  uint64_t graphs_captured() const override { return backend_->graphs_captured(); }
  bool overlaps_steps() const override {
    return overlap_ && backend_->samples_ahead() &&
           (backend_->queues_work() || overlap_everywhere_);
  }

  /// Forgets every outstanding step: its sequences go back to their lengths before it (nothing
  /// was committed) and the backend's draws still outstanding are waited for and dropped. Returns
  /// the first error such a draw reported (null when none).
  std::exception_ptr abandon_pending() {
    std::exception_ptr err;
    for (const Pending& p : pending_) {
      if (p.ahead) try {
          std::vector<int32_t> ids(p.row_item.size());
          backend_->sample_end(ids.data());
        } catch (...) {
          if (!err) err = std::current_exception();
        }
      for (size_t i = 0; i < p.seqs.size(); ++i)
        if (blocks_->has_sequence(p.seqs[i]) && blocks_->seq_len(p.seqs[i]) > p.start_len[i])
          blocks_->truncate(p.seqs[i], p.start_len[i]);
    }
    pending_.clear();
    return err;
  }

  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                          const std::function<bool(const std::string&)>& on_text) override {
    check(!prompt.empty(), "empty prompt: nothing to generate from");
    o.sampling.validate();
    check(o.max_tokens >= 0, "max tokens must be >= 0, got " + std::to_string(o.max_tokens));
    check((int)prompt.size() < ctx_,
          "prompt has " + std::to_string(prompt.size()) +
              " tokens, which leaves no room to generate in the context size " +
              std::to_string(ctx_) +
              " (the prompt must be shorter than the context: shorten it, or raise -c / "
              "--ctx-size)");
    GenerateResult r;
    r.prompt_tokens = (int)prompt.size();
    const SeqId seq = create_sequence();
    const SequenceRelease release{*this, seq};
    Sampler sampler(o.sampling);
    for (int32_t t : prompt) sampler.accept_prompt(t);
    StreamDecoder dec(*tokenizer_, /*skip_special=*/true, prompt);  // text continues the prompt's
    StopMatcher stop(o.stop);
    StepResult res;

    double t0 = now_seconds();
    const int budget = std::min(o.max_tokens, ctx_ - (int)prompt.size());
    for (size_t i = 0; i < prompt.size(); i += kPrefillChunk) {
      const size_t n = std::min(prompt.size() - i, (size_t)kPrefillChunk);
      StepItem it;
      it.seq = seq;
      it.tokens.assign(prompt.begin() + i, prompt.begin() + i + n);
      it.want_logits = i + n == prompt.size();
      it.sampler = it.want_logits && budget > 0 ? &sampler : nullptr;
      step({it}, res);
    }
    r.prefill_seconds = now_seconds() - t0;
    t0 = now_seconds();
    r.finish_reason = "length";
    // Overlapped decode: the step that makes token n + 2 is queued (its input, token n + 1, fed
    // on the device) before token n + 1 reaches the host; a step begun past the end is cancelled.
    const bool overlap = overlap_ && backend_->samples_ahead() && sampler_overlaps(o.sampling);
    bool keep_going = true;
    try {
      for (int n = 0; n < budget && keep_going; ++n) {
        const int32_t tok = res.tokens[0];
        sampler.accept(tok);
        if (!o.ignore_eos && std::find(eos_.begin(), eos_.end(), tok) != eos_.end()) {
          r.finish_reason = "stop";
          break;
        }
        r.output_ids.push_back(tok);
        const std::string piece = stop.push(dec.push(tok));
        if (!piece.empty()) {
          r.text += piece;
          if (on_text && !on_text(piece)) keep_going = false;
        }
        if (stop.stopped()) {
          r.finish_reason = "stop";
          break;
        }
        if (n + 1 >= budget || !keep_going) continue;
        if (!overlap) {
          step({StepItem{seq, {tok}, true, false, &sampler, false}}, res);
          continue;
        }
        if (pending_.empty()) step_begin({StepItem{seq, {tok}, true, false, &sampler, false}});
        if (n + 2 < budget) {
          StepItem next{seq, {}, true, false, &sampler, false};
          next.token_from_sample = true;
          step_begin({next});
        }
        step_end(res);
      }
      if (!pending_.empty()) step_cancel();
    } catch (...) {
      abandon_pending();  // leave no step outstanding (the sequence is released next)
      throw;
    }
    if (!stop.stopped()) {
      const std::string tail = stop.push(dec.finish()) + stop.flush();
      if (!tail.empty()) {
        r.text += tail;
        if (on_text) on_text(tail);
      }
    }
    r.decode_seconds = now_seconds() - t0;
    r.context_full =
        r.finish_reason == "length" && budget < o.max_tokens && (int)r.output_ids.size() == budget;
    return r;
  }

 private:
  /// A step begun and not ended.
  struct Pending {
    std::vector<SeqId> seqs;              // the items' sequences, in order
    std::vector<int> start_len, end_len;  // their lengths before and after the step
    std::vector<size_t> row_item;         // item of each sampled row
    bool ahead = false;                   // sampled by sample_begin: ids at sample_end
    std::vector<int> fed_item;            // per item: the previous step's item whose sample, on
                                          // the device, is its token (a placeholder in the block
                                          // manager until that step ends); -1: none
    StepResult result;                    // tokens (unless ahead) and copied logits
  };

  void begin(const std::vector<StepItem>& items, bool may_overlap) {
    check(!items.empty(), "step: no sequences");
    PERFX_CHECK(pending_.size() < 2, "step_begin: two steps are already outstanding");
    BatchLayout b;
    b.n_seqs = (int)items.size();
    int need = 0;
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        PERFX_CHECK(items[i].seq != items[j].seq,
                    "step: sequence " + std::to_string(items[i].seq) + " appears twice");
    // token_from_sample: the item's sequence had a sampled row in the step begun just before;
    // fed_row[i] is that row (the index of its id in the draw), fed_item[i] that step's item.
    const Pending* prev = pending_.empty() ? nullptr : &pending_.back();
    std::vector<int> fed_row(items.size(), -1), fed_item(items.size(), -1);
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& it = items[i];
      if (it.token_from_sample) {
        PERFX_CHECK(prev, "step_begin: token_from_sample without a step begun before it");
        PERFX_CHECK(it.tokens.empty(), "step: an item with token_from_sample and tokens");
        for (size_t r = 0; r < prev->row_item.size() && fed_row[i] < 0; ++r)
          if (prev->seqs[prev->row_item[r]] == it.seq) {
            fed_row[i] = (int)r;
            fed_item[i] = (int)prev->row_item[r];
          }
        PERFX_CHECK(fed_row[i] >= 0, "step_begin: token_from_sample item " + std::to_string(i) +
                                         " (sequence " + std::to_string(it.seq) +
                                         ") was not sampled in the step before");
      } else {
        PERFX_CHECK(!it.tokens.empty(), "step: a sequence with no new tokens");
      }
      PERFX_CHECK(blocks_->has_sequence(it.seq),
                  "step: unknown sequence " + std::to_string(it.seq));
      PERFX_CHECK(!it.sampler || it.want_logits || it.all_logits,
                  "step: a sampler on an item with no logits row");
      const int n_new = it.token_from_sample ? 1 : (int)it.tokens.size();
      const int len = blocks_->seq_len(it.seq);
      PERFX_CHECK(len + n_new <= ctx_, "sequence would have " + std::to_string(len + n_new) +
                                           " tokens, more than the context size " +
                                           std::to_string(ctx_));
      for (int32_t t : it.tokens)
        PERFX_CHECK(t >= 0 && t < config().vocab_size,
                    "token id " + std::to_string(t) + " is outside the vocabulary (" +
                        std::to_string(config().vocab_size) + ")");
      need += blocks_->blocks_needed(it.seq, n_new);
    }
    PERFX_CHECK(need <= blocks_->free_blocks(),
                "KV cache is full: " + std::to_string(need) + " blocks needed, " +
                    std::to_string(blocks_->free_blocks()) + " free");
    // The ids: on the device when the step before sampled ahead, else already on the host.
    bool fed = false;
    for (const auto& it : items) fed = fed || (it.token_from_sample && prev->ahead);
    Pending p;
    std::vector<int> first_row(items.size()), n_rows(items.size());
    std::vector<int32_t> tokens;
    for (int i = 0; i < b.n_seqs; ++i) {
      const auto& it = items[i];
      if (!it.token_from_sample)
        tokens = it.tokens;
      else if (fed)
        tokens.assign(1, 0);  // a placeholder, patched at the step before's end
      else
        tokens.assign(1, prev->result.tokens[(size_t)fed_item[(size_t)i]]);
      p.fed_item.push_back(it.token_from_sample && fed ? fed_item[(size_t)i] : -1);
      const int len = blocks_->seq_len(it.seq);
      const std::vector<int32_t> slots = blocks_->append(it.seq, tokens);
      p.seqs.push_back(it.seq);
      p.start_len.push_back(len);
      p.end_len.push_back(len + (int)tokens.size());
      first_row[i] = (int)b.logit_rows.size();
      for (size_t j = 0; j < tokens.size(); ++j) {
        if (it.all_logits || (it.want_logits && j + 1 == tokens.size()))
          b.logit_rows.push_back(b.n_tokens);
        b.token_ids.push_back(tokens[j]);
        if (fed) b.fed_rows.push_back(it.token_from_sample ? fed_row[(size_t)i] : -1);
        b.positions.push_back(len + (int)j);
        b.slots.push_back(slots[j]);
        b.token_seq.push_back(i);
        b.n_tokens++;
      }
      n_rows[i] = (int)b.logit_rows.size() - first_row[i];
      b.max_blocks = std::max(b.max_blocks, (int)blocks_->block_table(it.seq).size());
    }
    b.block_tables.assign((size_t)b.n_seqs * b.max_blocks, -1);
    for (int i = 0; i < b.n_seqs; ++i) {
      const auto& bt = blocks_->block_table(items[i].seq);
      std::copy(bt.begin(), bt.end(), b.block_tables.begin() + (size_t)i * b.max_blocks);
    }
    try {
      run_and_sample(items, b, first_row, n_rows, may_overlap, p);
    } catch (...) {  // the step never ran: its tokens (placeholders too) must not stay
      for (size_t i = 0; i < p.seqs.size(); ++i) blocks_->truncate(p.seqs[i], p.start_len[i]);
      throw;
    }
    pending_.push_back(std::move(p));
  }

  /// begin()'s forward pass and draw for the appended step `b`, into p.
  void run_and_sample(const std::vector<StepItem>& items, const BatchLayout& b,
                      const std::vector<int>& first_row, const std::vector<int>& n_rows,
                      bool may_overlap, Pending& p) {
    const Tensor lg = model_->forward(b, *kv_);
    // Raw rows to the host first (logprobs want them before penalties), then sample on the device.
    const size_t V = (size_t)config().vocab_size;
    StepResult& out = p.result;
    size_t copy_rows = 0;
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].copy_logits) copy_rows += (size_t)n_rows[i];
    out.logits.resize(copy_rows * V);
    size_t at = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].copy_logits || n_rows[i] == 0) continue;
      backend_->to_host(out.logits.data() + at * V, lg.rows_view(first_row[i], n_rows[i]).data,
                        (size_t)n_rows[i] * V * sizeof(float));
      at += (size_t)n_rows[i];
    }
    out.tokens.assign(items.size(), -1);
    std::vector<SampleRow> rows;
    bool ahead = may_overlap && backend_->samples_ahead();
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].sampler || n_rows[i] == 0) continue;
      rows.emplace_back();
      items[i].sampler->fill_row(rows.back());
      rows.back().row = first_row[i] + n_rows[i] - 1;
      p.row_item.push_back(i);
      ahead = ahead && sampler_overlaps(items[i].sampler->params());
    }
    if (!rows.empty()) {
      if (ahead) {
        backend_->sample_begin(lg, rows);
        p.ahead = true;
      } else {
        std::vector<int32_t> ids(rows.size());
        backend_->sample(lg, rows, ids.data());
        for (size_t r = 0; r < rows.size(); ++r) out.tokens[p.row_item[r]] = ids[r];
      }
    }
  }

  Checkpoint ck_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<KvStorage> kv_;
  std::vector<int32_t> eos_;
  int ctx_ = 0;
  SeqId next_seq_ = 1;
  std::string name_;
  std::deque<Pending> pending_;      // steps begun and not ended, oldest first
  bool overlap_ = true;              // PERFX_DECODE_OVERLAP (0: step_begin samples at once)
  bool overlap_everywhere_ = false;  // PERFX_DECODE_OVERLAP=2: overlaps_steps() also where
                                     // the backend runs a step inside the call (tests the
                                     // server's overlapped loop on the CPU)
};

}  // namespace

void Engine::step_begin(const std::vector<StepItem>&) {
  throw Error("this engine does not overlap steps");
}
void Engine::step_end(StepResult&) {
  throw Error("this engine does not overlap steps");
}
void Engine::step_cancel() {
  throw Error("this engine does not overlap steps");
}

bool Engine::sampler_overlaps(const SamplingParams& p) {
  const bool plain = p.temperature <= 0 || (p.top_k <= 0 && p.top_p >= 1 && p.min_p <= 0);
  return plain && !p.has_penalties();
}

std::vector<int32_t> Engine::eos_ids() const {
  std::vector<int32_t> ids = config().eos_token_ids;
  for (int32_t e : tokenizer().eos_ids())
    if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
  return ids;
}

void Engine::step_logits(std::vector<StepItem> items, std::vector<float>& logits) {
  for (auto& it : items) {
    it.copy_logits = true;
    it.sampler = nullptr;
  }
  StepResult r;
  step(items, r);
  logits = std::move(r.logits);
}

void Engine::prompt_logits(const std::vector<int32_t>& ids, std::vector<float>& logits) {
  const SequenceRelease release{*this, create_sequence()};
  step_logits({StepItem{release.seq, ids, true, true}}, logits);
}

std::unique_ptr<Engine> Engine::load(const EngineOptions& o) {
  return std::make_unique<EngineImpl>(o);
}

}  // namespace perfx
