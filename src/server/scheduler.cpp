// Continuous batching scheduler (see scheduler.h for the algorithm).
#include "server/scheduler.h"

#include <algorithm>
#include <ctime>

#include "perfx/model_config.h"
#include "runtime/stop_strings.h"
#include "server/limits.h"

namespace perfx::server {

using Clock = std::chrono::steady_clock;

namespace {
/// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), seconds.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

struct Scheduler::Seq {
  Seq(std::shared_ptr<RequestHandle> r, int idx, SequenceSpec sp, const Tokenizer& tok)
      : req(std::move(r)),
        index(idx),
        spec(std::move(sp)),
        sampler(spec.sampling),
        decoder(tok, /*skip_special=*/true, spec.prompt),  // text continues the prompt's
        stop(spec.stop) {
    tokens = std::move(spec.prompt);
    n_prompt = (int)tokens.size();
    for (int32_t t : tokens) sampler.accept_prompt(t);
  }

  std::shared_ptr<RequestHandle> req;
  int index;
  SequenceSpec spec;
  std::vector<int32_t> tokens;  // prompt + generated; tokens[kv..] are not in the KV cache yet
  int n_prompt = 0;
  SeqId id = -1;  // engine sequence while admitted
  int kv = 0;     // tokens in the engine's cache
  Sampler sampler;
  StreamDecoder decoder;
  StopMatcher stop;
  int generated = 0;
  bool admitted_once = false;
  bool done = false;
  uint64_t order = 0;       // admission order (preemption takes the newest)
  uint64_t last_step = 0;   // the newest step holding it (in flight while not yet ended)
  uint64_t await_step = 0;  // the outstanding step whose sample is its next token (0: none)
  Clock::time_point first_token, last_token;
};

// ------------------------------------------------------------------------------------------------
// RequestHandle

std::vector<Event> RequestHandle::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !events_.empty(); });
  std::vector<Event> out(std::make_move_iterator(events_.begin()),
                         std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void RequestHandle::cancel() {
  cancelled_ = true;
}

bool RequestHandle::finished() const {
  std::lock_guard<std::mutex> lk(mu_);
  return open_ == 0;
}

void RequestHandle::push(Event e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (e.kind != Event::Kind::Token) open_--;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

// ------------------------------------------------------------------------------------------------
// Scheduler

Scheduler::Scheduler(Engine& engine, SchedulerOptions opts, Metrics* metrics)
    : engine_(engine), opts_(opts), metrics_(metrics) {
  check(opts_.max_batch >= 1, "--max-batch must be >= 1");
  check(opts_.max_queue >= 0, "the queue size must be >= 0");
  check(opts_.prefill_chunk >= 1, "the prefill chunk must be >= 1 token");
  check_seconds("request_timeout_s (--timeout)", opts_.request_timeout_s);
  opts_.max_step_tokens = std::max(opts_.max_step_tokens, opts_.max_batch + opts_.prefill_chunk);
  eos_ = engine_.eos_ids();
  overlap_ = engine_.overlaps_steps();
  vocab_ = (int)engine_.config().vocab_size;
  if (metrics_) metrics_->set_kv_blocks(0, engine_.total_blocks());
}

Scheduler::~Scheduler() {
  stop();
}

void Scheduler::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever is left gets told.
  std::deque<std::unique_ptr<Seq>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(waiting_);
  }
  for (auto& s : left) fail(*s, 503, "the server is shutting down");
  // Running sequences end now with what they generated, marked as aborted (vLLM's "abort"), so a
  // client can tell the reply was cut short.
  for (auto& s : running_) finish(*s, "abort");
  running_.clear();
  n_running_ = 0;
}

int Scheduler::waiting() const {
  std::lock_guard<std::mutex> lk(mu_);
  return (int)waiting_.size();
}

bool Scheduler::is_eos(int32_t id) const {
  return std::find(eos_.begin(), eos_.end(), id) != eos_.end();
}

std::shared_ptr<RequestHandle> Scheduler::submit(std::vector<SequenceSpec> specs) {
  check(!specs.empty(), "a request needs at least one sequence");
  // More sequences than an idle server queues could never be admitted: a 429 would ask for retries
  // that cannot succeed.
  const int64_t most = (int64_t)opts_.max_queue + opts_.max_batch;
  if ((int64_t)specs.size() > most)
    throw TooManySequences("the request has " + std::to_string(specs.size()) +
                           " sequences (prompts × n); this server " + "takes at most " +
                           std::to_string(most) + " at once (--max-queue " +
                           std::to_string(opts_.max_queue) + " + --max-batch " +
                           std::to_string(opts_.max_batch) + ")");
  const int ctx = engine_.ctx();
  const int bs = engine_.block_size();
  for (const auto& sp : specs) {
    check(!sp.prompt.empty(), "the prompt is empty");
    sp.sampling.validate();
    check((int)sp.prompt.size() < ctx, "the prompt has " + std::to_string(sp.prompt.size()) +
                                           " tokens; the context size is " + std::to_string(ctx));
    const int blocks = ((int)sp.prompt.size() + 1 + bs - 1) / bs;
    check(blocks <= engine_.total_blocks(), "the prompt has " + std::to_string(sp.prompt.size()) +
                                                " tokens, more than the KV cache holds (" +
                                                std::to_string(engine_.total_blocks() * bs) +
                                                " tokens)");
    check(sp.max_tokens >= 1, "max_tokens must be at least 1");
    for (int32_t t : sp.prompt)
      check(t >= 0 && t < vocab_, "token id " + std::to_string(t) +
                                      " is outside the vocabulary (0.." +
                                      std::to_string(vocab_ - 1) + ")");
  }
  auto h = std::make_shared<RequestHandle>();
  h->n_seqs_ = h->open_ = (int)specs.size();
  h->arrival_ = Clock::now();
  if (opts_.request_timeout_s > 0) {
    h->has_deadline_ = true;
    h->deadline_ = h->arrival_ + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(opts_.request_timeout_s));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) throw ShuttingDown("the server is shutting down");
    // Free batch slots count as room too: --max-queue bounds what waits beyond the batch.
    const int room = opts_.max_queue + std::max(0, opts_.max_batch - n_running_.load());
    if ((int)(waiting_.size() + specs.size()) > room) {
      if (metrics_) metrics_->add_rejected();
      throw QueueFull("the server is busy: " + std::to_string(waiting_.size()) +
                      " sequences are already waiting (limit " + std::to_string(opts_.max_queue) +
                      "); retry later");
    }
    for (size_t i = 0; i < specs.size(); ++i)
      waiting_.push_back(
          std::make_unique<Seq>(h, (int)i, std::move(specs[i]), engine_.tokenizer()));
    if (metrics_) metrics_->set_queue_depth((int)waiting_.size());
  }
  cv_.notify_all();
  return h;
}

void Scheduler::loop() {
  Engine::StepResult res;
  while (true) {
    Clock::time_point t0;  // this iteration's work starts (the idle wait is not host work)
    double cpu0 = 0;       // the scheduler thread's CPU time then
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(100), [&] {
        return stopping_ || !waiting_.empty() || !running_.empty() || !outstanding_.empty();
      });
      t0 = Clock::now();
      cpu0 = thread_cpu_seconds();
      if (stopping_) break;
      // Waiting sequences that were cancelled or timed out leave the queue.
      const auto now = Clock::now();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        Seq& s = **it;
        if (s.req->cancelled()) {
          end_sequence(s, "cancelled");
          it = waiting_.erase(it);
        } else if (s.req->has_deadline_ && now >= s.req->deadline_) {
          fail(s, 503,
               "the request timed out after " + std::to_string((int)opts_.request_timeout_s) +
                   " s in the queue",
               "timeout");
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
    }
    reap_running();
    admit();
    update_gauges();
    StepTimes st;
    const bool stepped = schedule_step(res, &st);
    update_gauges();
    // Host work per step (issue 10: scheduling, KV allocation, detokenizing, stop strings, events)
    // against the step itself: the loop's time around the engine's step calls. Overlapped, the
    // step calls return while the device runs, so most of the step's time is in step_end's wait.
    if (stepped && metrics_)
      metrics_->add_step_time(st.wall, std::max(0.0, seconds_between(t0, Clock::now()) - st.wall),
                              std::max(0.0, thread_cpu_seconds() - cpu0 - st.cpu));
  }
  drain(res);
}

void Scheduler::update_gauges() {
  n_running_ = (int)running_.size();
  if (!metrics_) return;
  metrics_->set_running((int)running_.size());
  metrics_->set_queue_depth(waiting());
  metrics_->set_kv_blocks(engine_.total_blocks() - engine_.free_blocks(), engine_.total_blocks());
  metrics_->set_graphs_captured(engine_.graphs_captured());
}

bool Scheduler::in_flight(const Seq& s) const {
  return s.last_step > steps_ended_;
}

void Scheduler::end_sequence(Seq& s, const std::string& outcome) {
  if (s.id >= 0 && !in_flight(s)) {  // else released once its last step has ended
    engine_.release_sequence(s.id);
    s.id = -1;
  }
  s.done = true;
  RequestHandle& r = *s.req;
  bool last;
  {
    std::lock_guard<std::mutex> lk(r.mu_);
    // The request's outcome for metrics: the first sequence's, unless one went wrong.
    if (r.outcome_.empty() || outcome == "cancelled" || outcome == "error" || outcome == "timeout")
      r.outcome_ = outcome;
    last = ++r.ended_ == r.n_seqs_;
    if (outcome == "cancelled") r.open_--;  // no final event for a cancelled sequence
  }
  if (last && metrics_)
    metrics_->request_finished(r.outcome_, seconds_between(r.arrival_, Clock::now()));
}

void Scheduler::finish(Seq& s, const std::string& reason, const std::string& outcome) {
  std::string tail;
  if (!s.stop.stopped()) {
    tail = s.stop.push(s.decoder.finish());
    tail += s.stop.flush();
  }
  if (s.generated > 1 && metrics_)
    metrics_->observe_tpot(seconds_between(s.first_token, s.last_token) / (s.generated - 1));
  end_sequence(s, outcome.empty() ? reason : outcome);
  Event e;
  e.kind = Event::Kind::Finished;
  e.index = s.index;
  e.text = std::move(tail);
  e.finish_reason = reason;
  e.completion_tokens = s.generated;
  s.req->push(std::move(e));
}

void Scheduler::fail(Seq& s, int status, const std::string& message, const std::string& outcome) {
  end_sequence(s, outcome);
  Event e;
  e.kind = Event::Kind::Error;
  e.index = s.index;
  e.status = status;
  e.error = message;
  s.req->push(std::move(e));
}

void Scheduler::reap_running() {
  const auto now = Clock::now();
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.req->cancelled()) {
      end_sequence(s, "cancelled");
    } else if (s.req->has_deadline_ && now >= s.req->deadline_) {
      // Out of time: end it like a length limit, with what was generated so far.
      finish(s, "length", "timeout");
    }
  }
  retire_done();  // the ended sequences leave the batch
}

void Scheduler::retire_done() {
  for (size_t i = 0; i < running_.size();) {
    if (!running_[i]->done) {
      ++i;
      continue;
    }
    if (in_flight(*running_[i])) retired_.push_back(std::move(running_[i]));
    running_.erase(running_.begin() + (long)i);
  }
}

void Scheduler::release_retired() {
  for (size_t i = 0; i < retired_.size();) {
    Seq& s = *retired_[i];
    if (in_flight(s)) {
      ++i;
      continue;
    }
    if (s.id >= 0) engine_.release_sequence(s.id);
    retired_.erase(retired_.begin() + (long)i);
  }
}

void Scheduler::admit() {
  while ((int)running_.size() < opts_.max_batch) {
    std::unique_ptr<Seq> s;
    {
      // Moving a sequence from waiting_ to the batch updates n_running_ in the same critical
      // section, so submit() never sees it in neither (which let the queue bound be exceeded).
      std::lock_guard<std::mutex> lk(mu_);
      if (waiting_.empty()) return;
      s = std::move(waiting_.front());
      waiting_.pop_front();
      n_running_.fetch_add(1);
    }
    s->id = engine_.create_sequence();
    s->kv = s->spec.cache_prompt ? engine_.match_prefix(s->id, s->tokens) : 0;
    const int pending = (int)s->tokens.size() - s->kv;
    const int chunk = std::min(pending, opts_.prefill_chunk - s->kv % opts_.prefill_chunk);
    // Admission is allocation: the first chunk's KV blocks are taken now, keeping one block per
    // running sequence in reserve for their next tokens.
    const int reserve = (int)running_.size();
    const bool room = engine_.blocks_needed(s->id, chunk) + reserve <= engine_.free_blocks();
    // Alone with the whole cache (no sequence running, none ended and still held by an
    // outstanding step) the first chunk must fit.
    const bool alone = running_.empty() && retired_.empty();
    if (alone && !engine_.allocate_slots(s->id, chunk)) {
      // Cannot happen for a prompt submit() accepted (it fits the whole cache); never spin on it.
      fail(*s, 500, "the prompt does not fit the KV cache");
      n_running_.fetch_sub(1);
      continue;
    }
    if (!alone && (!room || !engine_.allocate_slots(s->id, chunk))) {
      engine_.release_sequence(s->id);
      s->id = -1;
      s->kv = 0;
      std::lock_guard<std::mutex> lk(mu_);
      waiting_.push_front(std::move(s));
      n_running_.fetch_sub(1);
      return;
    }
    if (!s->admitted_once) {
      s->admitted_once = true;
      if (metrics_) {
        metrics_->add_prompt_tokens(s->n_prompt);
        metrics_->add_prefix_cache_hit_tokens(s->kv);
      }
    }
    s->order = next_order_++;
    running_.push_back(std::move(s));
  }
}

void Scheduler::preempt(size_t i) {
  std::unique_ptr<Seq> s = std::move(running_[i]);
  running_.erase(running_.begin() + (long)i);
  engine_.release_sequence(s->id);
  s->id = -1;
  s->kv = 0;
  if (metrics_) metrics_->add_preemption();
  std::lock_guard<std::mutex> lk(mu_);
  waiting_.push_front(std::move(s));
  n_running_.fetch_sub(1);
}

bool Scheduler::make_plan(std::vector<Planned>& plan, bool may_preempt) {
  // KV allocation is the admission test (vLLM's allocate_slots): the step's items are allocated in
  // plan order; a prompt chunk that does not fit waits for a later step, a decoding token that does
  // not fit preempts the newest sequence and the plan is made again.
  while (true) {
    plan.clear();
    int budget = opts_.max_step_tokens;
    for (auto& s : running_) {  // decoding sequences first: one token each
      if (s->await_step) {
        // Its next token is being sampled: carried on from the device, unless that token ends it
        // by length (EOS and stop strings cannot be foreseen: their extra sample is dropped).
        const bool ends =
            s->generated + 1 >= s->spec.max_tokens || (int)s->tokens.size() + 1 >= engine_.ctx();
        if (!ends) {
          plan.push_back({s.get(), 1, true});
          budget -= 1;
        }
      } else if ((int)s->tokens.size() - s->kv == 1) {
        plan.push_back({s.get(), 1, false});
        budget -= 1;
      }
    }
    for (auto& s : running_) {  // then prompt chunks, oldest first, while the budget lasts
      const int pending = (int)s->tokens.size() - s->kv;
      if (s->await_step || pending <= 1) continue;
      const int n = std::min(pending, opts_.prefill_chunk - s->kv % opts_.prefill_chunk);
      if (n > budget) continue;
      plan.push_back({s.get(), n, false});
      budget -= n;
    }
    size_t fit = 0;
    while (fit < plan.size() && engine_.allocate_slots(plan[fit].s->id, plan[fit].n)) ++fit;
    if (fit == plan.size()) return true;
    const bool is_chunk = plan[fit].n > 1 || (int)plan[fit].s->tokens.size() - plan[fit].s->kv > 1;
    if (is_chunk && fit > 0) {  // defer this prompt chunk and the ones after it
      plan.resize(fit);
      return true;
    }
    if (!may_preempt) {  // the caller ends the outstanding step first
      plan.clear();
      return false;
    }
    if (running_.size() == 1) {
      // A single sequence that outgrew the whole KV cache: it ends as if it hit a length limit.
      finish(*running_[0], "length");
      running_.clear();
      plan.clear();
      return true;
    }
    size_t victim = 0;
    for (size_t i = 1; i < running_.size(); ++i)
      if (running_[i]->order > running_[victim]->order) victim = i;
    preempt(victim);
  }
}

bool Scheduler::schedule_step(Engine::StepResult& res, StepTimes* times) {
  *times = StepTimes{};
  bool ended = false;
  // A sampler with penalties needs its previous token on the host before its next row is drawn.
  bool feedable = true;
  for (const auto& s : running_)
    if (s->await_step && s->sampler.params().has_penalties()) feedable = false;
  if (!outstanding_.empty() && !feedable) {
    end_step(res, times);
    ended = true;
  }
  std::vector<Planned> plan;
  if (!running_.empty() && !make_plan(plan, outstanding_.empty())) {
    end_step(res, times);  // blocks ran out with a step outstanding: end it, then preempt
    ended = true;
    if (!running_.empty()) make_plan(plan, true);
  }
  const bool began = !plan.empty() && begin_step(plan, res, times);
  // Overlapped, the step begun now runs while the one before it is handled.
  while (outstanding_.size() > (began ? 1u : 0u)) {
    end_step(res, times);
    ended = true;
  }
  if (!began && !ended && !running_.empty()) {
    // Nothing could be scheduled (should not happen: admit() guarantees room for one).
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return began || ended;
}

bool Scheduler::begin_step(const std::vector<Planned>& plan, Engine::StepResult& res,
                           StepTimes* times) {
  Step st;
  st.id = ++steps_begun_;
  st.plan = plan;
  std::vector<Engine::StepItem> items;
  items.reserve(plan.size());
  int n_tokens = 0;
  for (const auto& p : plan) {
    Engine::StepItem it;
    it.seq = p.s->id;
    if (p.fed)
      it.token_from_sample = true;
    else
      it.tokens.assign(p.s->tokens.begin() + p.s->kv, p.s->tokens.begin() + p.s->kv + p.n);
    it.want_logits = p.fed || p.s->kv + p.n == (int)p.s->tokens.size();
    it.sampler = it.want_logits ? &p.s->sampler : nullptr;
    it.copy_logits = it.want_logits && p.s->spec.logprobs >= 0;
    st.sampled.push_back(it.want_logits);
    st.copied.push_back(it.copy_logits);
    items.push_back(std::move(it));
    n_tokens += p.n;
  }
  const auto t_step = Clock::now();
  const double cpu_step = thread_cpu_seconds();
  try {
    if (overlap_)
      engine_.step_begin(items);
    else
      engine_.step(items, res);
    times->wall += seconds_between(t_step, Clock::now());
    times->cpu += thread_cpu_seconds() - cpu_step;
  } catch (const std::exception& e) {
    // The engine refused the step: fail the sequences in it rather than the server.
    for (const auto& p : plan)
      if (!p.s->done) fail(*p.s, 500, std::string("engine error: ") + e.what());
    retire_done();
    return false;
  }
  if (metrics_) metrics_->add_step(n_tokens);
  for (size_t k = 0; k < plan.size(); ++k) {
    Seq& s = *plan[k].s;
    s.kv += plan[k].n;
    s.last_step = st.id;
    if (st.sampled[k]) s.await_step = st.id;
  }
  if (overlap_) {
    outstanding_.push_back(std::move(st));
  } else {
    steps_ended_ = st.id;
    handle_step(st, res);
  }
  return true;
}

void Scheduler::end_step(Engine::StepResult& res, StepTimes* times) {
  const auto t_step = Clock::now();
  const double cpu_step = thread_cpu_seconds();
  try {
    engine_.step_end(res);
  } catch (const std::exception& e) {
    // The device failed: every outstanding step is lost (the engine forgets them; any it kept
    // is ended here and its results dropped), and so are their sequences.
    while (engine_.steps_outstanding() > 0) try {
        engine_.step_end(res);
      } catch (const std::exception&) {
        break;
      }
    std::vector<Step> gone(outstanding_.begin(), outstanding_.end());
    outstanding_.clear();
    steps_ended_ = steps_begun_;
    for (const Step& st : gone)
      for (const auto& p : st.plan)
        if (!p.s->done) fail(*p.s, 500, std::string("engine error: ") + e.what());
    retire_done();
    release_retired();
    return;
  }
  times->wall += seconds_between(t_step, Clock::now());
  times->cpu += thread_cpu_seconds() - cpu_step;
  Step st = std::move(outstanding_.front());
  outstanding_.pop_front();
  steps_ended_ = st.id;
  handle_step(st, res);
}

void Scheduler::handle_step(const Step& st, const Engine::StepResult& res) {
  size_t row = 0;
  for (size_t k = 0; k < st.plan.size(); ++k) {
    if (!st.sampled[k]) continue;
    Seq& s = *st.plan[k].s;
    const float* raw = nullptr;
    if (st.copied[k]) raw = res.logits.data() + (row++) * (size_t)vocab_;
    if (s.done) continue;  // ended in an earlier step (or cancelled): this sample is dropped
    if (s.await_step == st.id) s.await_step = 0;
    on_token(s, res.tokens[k], raw);
  }
  retire_done();
  release_retired();
}

void Scheduler::drain(Engine::StepResult& res) {
  while (engine_.steps_outstanding() > 0) try {
      engine_.step_end(res);
    } catch (const std::exception&) {
      break;  // the engine forgot its steps, or it is broken: either way, stop asking
    }
  outstanding_.clear();
  steps_ended_ = steps_begun_;
  for (auto& s : running_) s->await_step = 0;
  release_retired();
}

void Scheduler::on_token(Seq& s, int32_t tok, const float* raw) {
  Event e;
  e.kind = Event::Kind::Token;
  e.index = s.index;
  s.sampler.accept(tok);
  const auto now = Clock::now();
  if (s.generated == 0 && s.first_token == Clock::time_point()) {
    s.first_token = now;
    if (metrics_) metrics_->observe_ttft(seconds_between(s.req->arrival_, now));
  }
  s.last_token = now;
  if (!s.spec.ignore_eos && is_eos(tok)) {
    finish(s, "stop");
    return;
  }
  s.generated++;
  s.tokens.push_back(tok);
  if (metrics_) metrics_->add_generation_tokens(1);
  e.token.id = tok;
  if (s.spec.logprobs >= 0 && raw) {
    e.token.logprob = token_logprob(raw, vocab_, tok);
    if (s.spec.logprobs > 0) {
      // Each alternative's text as if it had been chosen here (before the chosen one is pushed).
      for (const TokenLogprob& a : top_logprobs(raw, vocab_, s.spec.logprobs))
        e.token.top.push_back({a.id, a.logprob, s.decoder.peek(a.id).bytes});
    }
  }
  const bool at_length = s.generated >= s.spec.max_tokens || (int)s.tokens.size() >= engine_.ctx();
  std::string piece = s.decoder.push(tok);
  if (s.spec.logprobs >= 0) e.token.bytes = s.decoder.last_bytes();
  // The last token also releases what the detokenizer still holds (a partial character becomes
  // U+FFFD), so that the tokens' texts add up to the choice's text.
  if (at_length) piece += s.decoder.finish();
  if (s.spec.logprobs >= 0) e.token.text = piece;
  e.text = s.stop.push(piece);
  const bool stopped = s.stop.stopped();
  s.req->push(std::move(e));
  if (stopped) {
    finish(s, "stop");
  } else if (at_length) {
    finish(s, "length");
  }
}

}  // namespace perfx::server
