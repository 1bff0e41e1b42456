// The reference sampler (the numerical contract of Backend::sample): one token from one row of
// logits by SampleRow's rules. The CPU backend runs it per row; device backends are tested against
// it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace perfx::cpu {

/// Picks a token from logits [n_vocab] (modified in place: penalties, then temperature) following
/// SampleRow's order: penalties → greedy (argmax, lowest id on ties) when temperature <= 0, else
/// top-k (ties by lower id) → softmax(l / T) → top-p (smallest prefix with mass >= top_p) → min-p
/// (keep p >= min_p · p_max) → the first candidate where u · Σp falls, in descending order. With no
/// truncation at all the draw runs over the vocabulary in id order without sorting (O(vocab)).
/// Penalty ids outside [0, n_vocab) are ignored; a finite logit a penalty overflows to +inf becomes
/// the largest float (so the softmax stays finite). `scratch` is reused between calls. Throws
/// perfx::Error "the model's logits are not finite (NaN at token id N): ..." when a logit is NaN or
/// +inf as given, before the penalties (-inf, a masked token, is allowed).
int32_t sample_logits(float* logits, int n_vocab, const SampleRow& r,
                      std::vector<std::pair<float, int32_t>>& scratch);

}  // namespace perfx::cpu
