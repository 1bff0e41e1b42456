// Token sampling: greedy, temperature, top-k, top-p (nucleus), min-p, repetition / presence /
// frequency penalties, seeded RNG (same seed ⇒ same output).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "perfx/status.h"

namespace perfx {

struct SampleRow;  // backend/backend.h

/// A SamplingParams field out of range, from SamplingParams::validate(). what() is
/// "<field> <reason>", e.g. "top_p must be in (0, 1] (1 = off), got 0"; field() ("top_p", the
/// member's name) and reason() let a front end name the field its own way (a CLI flag, an API
/// parameter).
class InvalidSamplingParam : public Error {
 public:
  InvalidSamplingParam(std::string field, std::string reason)
      : Error(field + " " + reason), field_(std::move(field)), reason_(std::move(reason)) {}
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string field_, reason_;
};

struct SamplingParams {
  float temperature = 0.8f;    // <= 0: greedy (argmax)
  int top_k = 40;              // 0 or -1: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off (keep p >= min_p · p_max)
  float repeat_penalty = 1.0f; // llama.cpp/CTRL style: logit > 0 ? logit / r : logit * r, for
                               // every token in the window, prompt or generated (as llama.cpp's
                               // --repeat-penalty, vLLM's repetition_penalty)
  int repeat_last_n = 64;      // window (last tokens of prompt + output) for all penalties;
                               // -1 = whole history
  float presence_penalty = 0;  // OpenAI: logit -= presence · [count > 0], generated tokens only
  float frequency_penalty = 0; // OpenAI: logit -= frequency · count, generated tokens only
  uint64_t seed = 0;           // RNG seed

  /// Checks the ranges a user may ask for: temperature >= 0, top_k >= -1, top_p in (0, 1], min_p in
  /// [0, 1], repeat_penalty > 0, repeat_last_n >= -1, finite presence / frequency penalties.
  /// Throws InvalidSamplingParam (a perfx::Error) naming the first field out of range.
  void validate() const;
  /// True when a penalty is on (the next draw then depends on the tokens drawn before it).
  bool has_penalties() const {
    return repeat_penalty != 1.0f || presence_penalty != 0 || frequency_penalty != 0;
  }
};

/// One alternative with its log-probability (natural log, over the full vocabulary of raw logits).
struct TokenLogprob {
  int32_t id;
  float logprob;
};

/// Picks tokens from logits. Order (as llama.cpp's default chain): penalties → top-k → temperature →
/// softmax → top-p → min-p → draw. Greedy when temperature <= 0 (penalties still apply).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  /// Samples from logits [n_vocab] (modified in place). Does not record the token: call accept().
  int32_t sample(float* logits, int n_vocab);
  /// Records a generated token in the penalty history (all penalties see it).
  void accept(int32_t id);
  /// Records a prompt token, in order, before the first generated one: the repetition penalty
  /// sees it, presence / frequency penalties (generated tokens only, as OpenAI's) do not.
  void accept_prompt(int32_t id);
  /// The parameters, penalty history and (unless greedy) the next random draw for one
  /// Backend::sample row; sample() is fill_row + the reference sampler (backend/cpu/sampling.h).
  void fill_row(SampleRow& r);
  const SamplingParams& params() const { return p_; }

 private:
  double uniform();  // [0, 1)
  SamplingParams p_;
  uint64_t state_;
  void record(int32_t id, bool generated);
  std::deque<std::pair<int32_t, bool>> window_;  // (id, generated)
  std::unordered_map<int32_t, int> counts_;      // in the window: repetition penalty
  std::unordered_map<int32_t, int> out_counts_;  // generated ones in the window: presence/frequency
  std::vector<std::pair<float, int32_t>> scratch_;
};

/// log_softmax(logits)[id]. logits [n_vocab].
float token_logprob(const float* logits, int n_vocab, int32_t id);
/// The k most likely tokens under log_softmax(logits), most likely first.
std::vector<TokenLogprob> top_logprobs(const float* logits, int n_vocab, int k);

}  // namespace perfx
