// FakeEngine / FakeTokenizer (see fake_engine.h).
#include "fake_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "perfx/status.h"

namespace perfx::test {
std::vector<int32_t> FakeTokenizer::encode(std::string_view text, bool add_bos, bool) const {
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(0);
  size_t k = 0;
  while (k < text.size()) {
    if (text.compare(k, 3, "<s>") == 0) {
      ids.push_back(0);
      k += 3;
      continue;
    }
    if (text.compare(k, 4, "</s>") == 0) {
      ids.push_back(1);
      k += 4;
      continue;
    }
    const char* p = std::strchr(kChars, text[k]);
    ids.push_back(p && text[k] ? (int32_t)(p - kChars) + 2
                               : (int32_t)(std::strchr(kChars, '?') - kChars) + 2);
    ++k;
  }
  return ids;
}

std::string FakeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 2) {
      if (!skip_special) out += id == 0 ? "<s>" : "</s>";
      continue;
    }
    if (id < vocab_size()) out += kChars[id - 2];
  }
  return out;
}

int32_t FakeTokenizer::vocab_size() const {
  return (int32_t)std::strlen(kChars) + 2;
}

std::string FakeTokenizer::id_to_token(int32_t id) const {
  return decode({id}, false);
}

FakeEngine::FakeEngine(FakeEngineOptions o)
    : o_(o), blocks_((o.kv_tokens + o.block_size - 1) / o.block_size, o.block_size) {
  cfg_.vocab_size = tokenizer().vocab_size();
  cfg_.eos_token_ids = o.config_eos;
  cfg_.bos_token_id = 0;
  cfg_.max_position_embeddings = o.ctx;
}

int32_t FakeEngine::next_token(const std::vector<int32_t>& history, int eos_after) {
  if (eos_after > 0 && (int)history.size() >= eos_after) return 1;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < history.size(); ++i) {
    h ^= (uint64_t)history[i] + 0x9e3779b97f4a7c15ull * (i + 1);
    h *= 1099511628211ull;
  }
  const int32_t n_chars = (int32_t)std::strlen(FakeTokenizer::kChars);
  return 2 + (int32_t)(h % (uint64_t)n_chars);
}

std::vector<int32_t> FakeEngine::solo(const std::vector<int32_t>& prompt, int max_tokens) const {
  std::vector<int32_t> h = prompt, out;
  while ((int)out.size() < max_tokens && (int)h.size() < o_.ctx) {
    int32_t t = next_token(h, o_.eos_after);
    if (t == 1) break;
    out.push_back(t);
    h.push_back(t);
  }
  return out;
}

SeqId FakeEngine::create_sequence() {
  std::lock_guard<std::mutex> lk(mu_);
  SeqId id = next_++;
  blocks_.add_sequence(id);
  history_[id] = {};
  return id;
}

void FakeEngine::release_sequence(SeqId id) {
  for (const Pending& p : pending_)
    for (SeqId s : p.seqs)
      if (s == id) released_in_flight_++;
  std::lock_guard<std::mutex> lk(mu_);
  blocks_.remove_sequence(id);
  history_.erase(id);
}

int FakeEngine::seq_len(SeqId id) const {
  std::lock_guard<std::mutex> lk(mu_);
  return blocks_.seq_len(id);
}

int FakeEngine::match_prefix(SeqId id, const std::vector<int32_t>& tokens) {
  if (o_.match_prefix_sleep_us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(o_.match_prefix_sleep_us));
  std::lock_guard<std::mutex> lk(mu_);
  int n = blocks_.match_prefix(id, tokens);
  history_[id].assign(tokens.begin(), tokens.begin() + n);
  return n;
}

int FakeEngine::blocks_needed(SeqId id, int n) const {
  std::lock_guard<std::mutex> lk(mu_);
  return blocks_.blocks_needed(id, n);
}

int FakeEngine::free_blocks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return blocks_.free_blocks();
}

int FakeEngine::total_blocks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return blocks_.total_blocks();
}

bool FakeEngine::allocate_slots(SeqId id, int n_new) {
  std::lock_guard<std::mutex> lk(mu_);
  return blocks_.allocate(id, n_new);
}

void FakeEngine::step(const std::vector<StepItem>& items, StepResult& out) {
  check(pending_.empty(), "step: a step_begin is outstanding");
  run(items, out);
}

void FakeEngine::step_begin(const std::vector<StepItem>& items) {
  check(o_.overlap, "FakeEngine: overlap is off");
  check(pending_.size() < 2, "step_begin: two steps are already outstanding");
  // token_from_sample: the id the step begun just before drew for the item's sequence (known at
  // once here; a device engine feeds it on the device).
  std::vector<StepItem> resolved = items;
  for (auto& it : resolved) {
    if (!it.token_from_sample) continue;
    check(!pending_.empty(), "step_begin: token_from_sample without a step before it");
    const Pending& prev = pending_.back();
    int32_t tok = -1;
    for (size_t i = 0; i < prev.seqs.size(); ++i)
      if (prev.seqs[i] == it.seq) tok = prev.result.tokens[i];
    check(tok >= 0, "step_begin: token_from_sample for a sequence the step before did not sample");
    it.tokens = {tok};
    it.token_from_sample = false;
  }
  Pending p;
  for (const auto& it : items) p.seqs.push_back(it.seq);
  run(resolved, p.result);
  pending_.push_back(std::move(p));
  max_outstanding_ = std::max(max_outstanding_.load(), (int)pending_.size());
}

void FakeEngine::step_end(StepResult& out) {
  check(!pending_.empty(), "step_end: no step is outstanding");
  if (fail_step_ends_ > 0) {  // as the engine does when a draw fails: every step is forgotten
    fail_step_ends_--;
    pending_.clear();
    throw Error("injected step_end failure");
  }
  out = std::move(pending_.front().result);
  pending_.pop_front();
}

void FakeEngine::run(const std::vector<StepItem>& items, StepResult& out) {
  if (o_.step_sleep_us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(o_.step_sleep_us));
  if (fail_steps_ > 0) {
    fail_steps_--;
    throw Error("injected step failure");
  }
  std::lock_guard<std::mutex> lk(mu_);
  check(!items.empty(), "step: no items");
  int need = 0;
  for (const auto& it : items) {
    check(history_.count(it.seq), "step: unknown sequence");
    check(!it.tokens.empty(), "step: empty item");
    check(blocks_.seq_len(it.seq) + (int)it.tokens.size() <= o_.ctx, "step: past the context");
    need += blocks_.blocks_needed(it.seq, (int)it.tokens.size());
  }
  check(need <= blocks_.free_blocks(), "KV cache is full");
  const int V = tokenizer().vocab_size();
  out.logits.clear();
  out.tokens.assign(items.size(), -1);
  StepRecord rec;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    blocks_.append(it.seq, it.tokens);
    auto& h = history_[it.seq];
    h.insert(h.end(), it.tokens.begin(), it.tokens.end());
    rec.tokens_per_item.push_back((int)it.tokens.size());
    if (!it.want_logits) continue;
    std::vector<float> row((size_t)V, 0.0f);
    if (o_.model) {
      o_.model(h, row);
    } else {
      const int32_t next = next_token(h, o_.eos_after);
      row[(size_t)next] = 12.0f;
      row[(size_t)((next + 1) % V)] = 1.0f;  // a runner-up for logprob tests
    }
    if (it.copy_logits) out.logits.insert(out.logits.end(), row.begin(), row.end());
    if (it.sampler) out.tokens[i] = it.sampler->sample(row.data(), V);
  }
  for (const auto& it : items) blocks_.commit(it.seq);  // as Engine::step does after forward
  steps_.push_back(std::move(rec));
}

Engine::GenerateResult FakeEngine::generate(const std::vector<int32_t>&, const GenerateOptions&,
                                            const std::function<bool(const std::string&)>&) {
  throw Error("FakeEngine::generate is not used by the server");
}

std::vector<FakeEngine::StepRecord> FakeEngine::steps() const {
  std::lock_guard<std::mutex> lk(mu_);
  return steps_;
}

int FakeEngine::live_sequences() const {
  std::lock_guard<std::mutex> lk(mu_);
  return (int)history_.size();
}

}  // namespace perfx::test
