// The serving scheduler: iteration-level continuous batching over one Engine.
//
// One thread owns the Engine. Each iteration it (1) drops cancelled and timed-out sequences,
// (2) admits waiting sequences into the running batch (attaching cached prompt blocks through
// Engine::match_prefix), (3) plans one step — every decoding sequence contributes its one pending
// token, prefilling sequences contribute a chunk of their prompt — (4) preempts the most recently
// admitted sequences (freeing their KV blocks; they are recomputed later from their tokens) when
// the step needs more blocks than are free, (5) runs Engine::step once for the whole batch and
// (6) samples, detokenizes and applies stop strings per sequence, handing the results to the
// request's handle. Requests therefore join and leave the batch between steps.
//
// Overlapped (vLLM's async scheduling), when the engine overlaps steps (Engine::overlaps_steps):
// step k + 1 is planned and begun while step k runs, before its samples reach the host; each
// sequence sampled in step k is carried on with its token fed from the device (token_from_sample),
// unless it ends by length there. Step k's tokens are then handled (6) while step k + 1 runs. A
// sequence that ended in step k (EOS, stop string, cancelled) drops step k + 1's sample, and its
// KV blocks are released once no outstanding step holds it. The loop ends step k first, planning
// as above, when step k sampled a sequence with penalties (its history needs the token) and when
// the next step needs blocks that only a preemption frees.
//
// Numerics: a sequence's prefill chunks end on multiples of prefill_chunk (as Engine::generate
// chunks), whatever else is in the batch, and the engine computes each sequence independently, so
// greedy output does not depend on what else is being served.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perfx/engine.h"
#include "perfx/sampling.h"
#include "perfx/status.h"
#include "server/metrics.h"

namespace perfx::server {

struct SchedulerOptions {
  int max_batch = 64;            // sequences in the running batch
  int max_queue = 256;           // sequences waiting to join it; more are refused (QueueFull)
  int prefill_chunk = 512;       // prompt tokens per sequence per step
  int max_step_tokens = 0;       // tokens per step over all sequences; 0: max_batch + prefill_chunk
  double request_timeout_s = 0;  // a request still running after this long is ended; 0: never
};

/// What to generate for one sequence (one choice of a request).
struct SequenceSpec {
  std::vector<int32_t> prompt;
  int max_tokens = 16;  // >= 1
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  bool ignore_eos = false;
  bool cache_prompt = true;  // false: computed in full, no prefix-cache reuse (llama.cpp's field)
  int logprobs = -1;  // -1: none; 0: the chosen token's; k > 0: also the k most likely
};

/// An alternative to a generated token (logprobs).
struct TokenAlt {
  int32_t id = 0;
  float logprob = 0;
  std::string bytes;  // the raw bytes it would have added to the text had it been chosen
};

/// A generated token with its log-probability and text (filled when logprobs were asked for).
struct TokenOut {
  int32_t id = 0;
  float logprob = 0;
  std::string text;   // the text it released (the detokenizer's, before stop strings): a choice's
                      // tokens' texts concatenate to its text (unless a stop string cut it)
  std::string bytes;  // its raw bytes: its exact contribution, maybe part of a UTF-8 character
  std::vector<TokenAlt> top;  // the most likely tokens, most likely first
};

/// Something that happened to one sequence of a request.
struct Event {
  enum class Kind { Token, Finished, Error };
  Kind kind = Kind::Token;
  int index = 0;              // which sequence of the request
  std::string text;           // Token / Finished: text released now (may be empty)
  TokenOut token;             // Token
  std::string finish_reason;  // Finished: "stop" | "length" | "abort" (server shutting down)
  int completion_tokens = 0;  // Finished: tokens generated for this sequence
  int status = 500;           // Error: HTTP status to report
  std::string error;          // Error: message
};

/// Thrown by Scheduler::submit when the waiting queue is full.
class QueueFull : public Error {
 public:
  using Error::Error;
};

/// Thrown by Scheduler::submit for a request of more sequences than max_queue + max_batch (more
/// than an idle server takes): a request error, not a full queue.
class TooManySequences : public Error {
 public:
  using Error::Error;
};

/// Thrown by Scheduler::submit once the scheduler is stopping.
class ShuttingDown : public Error {
 public:
  using Error::Error;
};

/// The HTTP side's view of a submitted request: a stream of events, and cancellation.
class RequestHandle {
 public:
  /// Waits up to `timeout` for events and returns those that arrived (possibly none).
  std::vector<Event> wait(std::chrono::milliseconds timeout);
  /// Asks the scheduler to drop the request; its sequences leave the batch (and their KV blocks
  /// are freed) before the next step.
  void cancel();
  bool cancelled() const { return cancelled_; }
  /// True once every sequence finished or failed (the last events may still be unread).
  bool finished() const;
  /// Number of sequences.
  int size() const { return n_seqs_; }

 private:
  friend class Scheduler;
  void push(Event e);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  int n_seqs_ = 0;
  int open_ = 0;   // sequences whose final event has not been pushed
  int ended_ = 0;  // sequences the scheduler is done with
  std::atomic<bool> cancelled_{false};
  std::chrono::steady_clock::time_point arrival_;
  std::chrono::steady_clock::time_point deadline_;
  bool has_deadline_ = false;
  std::string outcome_;  // what the request ended with, for metrics
};

class Scheduler {
 public:
  /// `metrics` may be null. The engine must outlive the scheduler.
  Scheduler(Engine& engine, SchedulerOptions opts, Metrics* metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Starts the scheduling thread.
  void start();
  /// Stops it (idempotent; not from two threads at once): sequences still queued get an Error
  /// event (503), running ones a Finished event with finish_reason "abort" and their text so far.
  void stop();

  /// Queues the sequences of one request. Throws QueueFull when they do not fit in the waiting
  /// queue (max_queue plus the free batch slots), ShuttingDown after stop(), perfx::Error for a
  /// sequence the engine can never serve (empty prompt, prompt too long for the context or the
  /// whole KV cache, max_tokens < 1); TooManySequences for a request of more sequences than
  /// max_queue + max_batch (more than an idle server would queue).
  std::shared_ptr<RequestHandle> submit(std::vector<SequenceSpec> seqs);

  const SchedulerOptions& options() const { return opts_; }
  /// Sequences waiting / running now.
  int waiting() const;
  int running() const { return n_running_; }

 private:
  struct Seq;
  void loop();
  void reap_running();
  void admit();
  /// Wall and scheduler-thread CPU seconds of one Engine::step.
  struct StepTimes {
    double wall = 0, cpu = 0;
  };
  struct Planned {
    Seq* s;
    int n;     // tokens it appends
    bool fed;  // its one token is its sample from the outstanding step (token_from_sample)
  };
  /// A step begun and not yet handled.
  struct Step {
    uint64_t id = 0;
    std::vector<Planned> plan;
    std::vector<char> sampled, copied;  // per item: a sampled row / its raw row copied
  };
  /// Plans the next step (begins it, and ends the step before it when one is outstanding);
  /// *times = the time inside the engine's step calls. False when no step was begun or ended.
  bool schedule_step(Engine::StepResult& res, StepTimes* times);
  /// The next step's items into plan. With may_preempt false (a step outstanding) false when they
  /// need blocks that only a preemption would free; the plan is then empty.
  bool make_plan(std::vector<Planned>& plan, bool may_preempt);
  /// Begins (overlapped) or runs and handles (otherwise) the planned step. False if it failed.
  bool begin_step(const std::vector<Planned>& plan, Engine::StepResult& res, StepTimes* times);
  /// Ends the oldest outstanding step and hands its tokens to the sequences.
  void end_step(Engine::StepResult& res, StepTimes* times);
  void handle_step(const Step& st, const Engine::StepResult& res);
  /// Ends every outstanding step, dropping its results (the loop is stopping).
  void drain(Engine::StepResult& res);
  /// Moves the done sequences out of running_; those an outstanding step holds wait in retired_.
  void retire_done();
  /// Releases the retired sequences no outstanding step holds any more.
  void release_retired();
  bool in_flight(const Seq& s) const;
  /// A sequence's newly sampled token; raw = its raw logits row when logprobs were asked for.
  void on_token(Seq& s, int32_t tok, const float* raw);
  // Ends a sequence with a Finished event; `outcome` (for metrics) defaults to the reason.
  void finish(Seq& s, const std::string& reason, const std::string& outcome = "");
  // Ends a sequence with an Error event.
  void fail(Seq& s, int status, const std::string& message, const std::string& outcome = "error");
  void preempt(size_t running_index);
  void end_sequence(Seq& s, const std::string& outcome);
  void update_gauges();
  bool is_eos(int32_t id) const;

  Engine& engine_;
  SchedulerOptions opts_;
  Metrics* metrics_;
  std::vector<int32_t> eos_;
  int vocab_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> waiting_;   // guarded by mu_
  bool stopping_ = false;                      // guarded by mu_
  std::vector<std::unique_ptr<Seq>> running_;  // scheduler thread only
  std::vector<std::unique_ptr<Seq>> retired_;  // done, still held by an outstanding step
  std::deque<Step> outstanding_;               // steps begun and not handled, oldest first
  uint64_t steps_begun_ = 0, steps_ended_ = 0;  // step ids: 1, 2, ...
  bool overlap_ = false;                        // Engine::overlaps_steps()
  std::atomic<int> n_running_{0};
  uint64_t next_order_ = 0;
  std::thread thread_;
};

}  // namespace perfx::server
