// Engine: model + tokenizer + paged KV cache on one backend.
#include "perfx/engine.h"

#include <algorithm>
#include <chrono>
#include <new>

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

constexpr int kMaxCtx = 1 << 20;
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
    check(o.ctx >= 0 && o.ctx <= kMaxCtx, "context size " + std::to_string(o.ctx) +
                                              " is out of range (0 = model default, or 1.." +
                                              std::to_string(kMaxCtx) + ")");
    check(o.kv_cache_tokens >= 0 && o.kv_cache_tokens <= 64 * kMaxCtx,
          "--kv-cache-tokens " + std::to_string(o.kv_cache_tokens) +
              " is out of range (0 = default, or up to " + std::to_string(64 * kMaxCtx) + ")");
    check(o.block_size > 0 && o.block_size <= 4096, "KV block size must be 1..4096");
    check(o.gpu_memory_utilization >= 0 && o.gpu_memory_utilization <= 1,
          "GPU memory utilization must be in (0, 1], got " +
              std::to_string(o.gpu_memory_utilization));
    ck_ = open_checkpoint(o.model_path);
    backend_ = create_backend(o.device, o.n_threads);
    model_ = std::make_unique<LlamaModel>(ck_, *backend_);
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
      kv_tokens = (int)std::min<double>(fit, 64.0 * kMaxCtx);
    }
    const int n_blocks = (kv_tokens + o.block_size - 1) / o.block_size;
    blocks_ = std::make_unique<BlockManager>(n_blocks, o.block_size);
    try {
      kv_ = backend_->create_kv((int)c.num_hidden_layers, n_blocks, o.block_size,
                                (int)c.num_key_value_heads, (int)c.head_dim, kvt);
    } catch (const std::bad_alloc&) {
      throw Error("cannot allocate the KV cache (" +
                  std::to_string((int64_t)n_blocks * o.block_size) +
                  " tokens): out of memory; lower --kv-cache-tokens, --kv-cache-mib or -c");
    } catch (const Error& e) {
      // A cache type the backend does not store is the flag's problem, not an allocation's.
      if (std::string(e.what()).find("--cache-type") != std::string::npos) throw;
      throw Error("cannot allocate the KV cache (" +
                  std::to_string((int64_t)n_blocks * o.block_size) + " tokens): " + e.what());
    }
    eos_ = eos_ids();
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
    check(!items.empty(), "step: no sequences");
    BatchLayout b;
    b.n_seqs = (int)items.size();
    int need = 0;
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        PERFX_CHECK(items[i].seq != items[j].seq,
                    "step: sequence " + std::to_string(items[i].seq) + " appears twice");
    for (const auto& it : items) {
      PERFX_CHECK(!it.tokens.empty(), "step: a sequence with no new tokens");
      PERFX_CHECK(blocks_->has_sequence(it.seq),
                  "step: unknown sequence " + std::to_string(it.seq));
      PERFX_CHECK(!it.sampler || it.want_logits || it.all_logits,
                  "step: a sampler on an item with no logits row");
      const int len = blocks_->seq_len(it.seq);
      PERFX_CHECK(len + (int)it.tokens.size() <= ctx_,
                  "sequence would have " + std::to_string(len + it.tokens.size()) +
                      " tokens, more than the context size " + std::to_string(ctx_));
      for (int32_t t : it.tokens)
        PERFX_CHECK(t >= 0 && t < config().vocab_size,
                    "token id " + std::to_string(t) + " is outside the vocabulary (" +
                        std::to_string(config().vocab_size) + ")");
      need += blocks_->blocks_needed(it.seq, (int)it.tokens.size());
    }
    PERFX_CHECK(need <= blocks_->free_blocks(),
                "KV cache is full: " + std::to_string(need) + " blocks needed, " +
                    std::to_string(blocks_->free_blocks()) + " free");
    std::vector<int> first_row(items.size()), n_rows(items.size());
    for (int i = 0; i < b.n_seqs; ++i) {
      const auto& it = items[i];
      const int len = blocks_->seq_len(it.seq);
      const std::vector<int32_t> slots = blocks_->append(it.seq, it.tokens);
      first_row[i] = (int)b.logit_rows.size();
      for (size_t j = 0; j < it.tokens.size(); ++j) {
        if (it.all_logits || (it.want_logits && j + 1 == it.tokens.size()))
          b.logit_rows.push_back(b.n_tokens);
        b.token_ids.push_back(it.tokens[j]);
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
    const Tensor lg = model_->forward(b, *kv_);
    for (const auto& it : items) blocks_->commit(it.seq);  // K/V written: blocks may be shared now
    // Raw rows to the host first (logprobs want them before penalties), then sample on the device.
    const size_t V = (size_t)config().vocab_size;
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
    std::vector<size_t> row_item;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].sampler || n_rows[i] == 0) continue;
      rows.emplace_back();
      items[i].sampler->fill_row(rows.back());
      rows.back().row = first_row[i] + n_rows[i] - 1;
      row_item.push_back(i);
    }
    if (!rows.empty()) {
      std::vector<int32_t> ids(rows.size());
      backend_->sample(lg, rows, ids.data());
      for (size_t r = 0; r < rows.size(); ++r) out.tokens[row_item[r]] = ids[r];
    }
  }

  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                          const std::function<bool(const std::string&)>& on_text) override {
    check(!prompt.empty(), "empty prompt: nothing to generate from");
    o.sampling.validate();
    check(o.max_tokens >= 0, "max tokens must be >= 0, got " + std::to_string(o.max_tokens));
    check((int)prompt.size() < ctx_, "prompt has " + std::to_string(prompt.size()) +
                                         " tokens, which does not fit the context size " +
                                         std::to_string(ctx_));
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
    bool keep_going = true;
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
      if (n + 1 < budget && keep_going) {
        StepItem it{seq, {tok}, true, false, &sampler, false};
        step({it}, res);
      }
    }
    if (!stop.stopped()) {
      const std::string tail = stop.push(dec.finish()) + stop.flush();
      if (!tail.empty()) {
        r.text += tail;
        if (on_text) on_text(tail);
      }
    }
    r.decode_seconds = now_seconds() - t0;
    return r;
  }

 private:
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
};

}  // namespace

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
