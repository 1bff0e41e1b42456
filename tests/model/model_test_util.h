// Helpers for the model parity tests: run a checkpoint on token ids and compare with references.
#pragma once

#include <string>
#include <vector>

#include "model/llama.h"
#include "perfx/engine.h"
#include "perfx/sampling.h"

namespace perfx::test {

/// One new sequence of `e` per prompt, each with its own sampler (parameters sp): `items` is their
/// first step (the prompt's tokens; item i samples with samplers[i]). Give the sequences back with
/// release().
struct PromptedSequences {
  std::vector<Sampler> samplers;
  std::vector<Engine::StepItem> items;
  std::vector<SeqId> seqs;
  // items point into samplers: a move keeps the buffer, a copy would not
  PromptedSequences() = default;
  PromptedSequences(PromptedSequences&&) = default;
  PromptedSequences(const PromptedSequences&) = delete;
  PromptedSequences& operator=(const PromptedSequences&) = delete;
  void release(Engine& e) const {
    for (SeqId s : seqs) e.release_sequence(s);
  }
};
PromptedSequences start_sequences(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                  const SamplingParams& sp);

/// Every logits row of `n` greedy decode steps after each prompt ([n, prompts.size(), vocab]
/// floats), the sequences stepped together through Engine::step; the sequences are released.
std::vector<float> greedy_step_logits(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                      int n);

/// Logits [ids.size(), vocab] of the model at `path` (HF folder or GGUF) for one sequence, computed
/// on `device` (create_backend's name) through the same LlamaModel the Engine uses (no tokenizer).
/// Default "cpu-exact": the CPU backend's fp32-activation kernels (PERFX_ACT_QUANT=off), which the
/// parity tests against transformers use. `mo`: the model's load options.
std::vector<float> model_logits(const std::string& path, const std::vector<int32_t>& ids,
                                int64_t* vocab, const std::string& device = "cpu-exact",
                                const ModelOptions& mo = {});
/// The same for an open checkpoint (e.g. one whose tensors a test replaced).
std::vector<float> model_logits(const Checkpoint& ck, const std::vector<int32_t>& ids,
                                int64_t* vocab, const std::string& device = "cpu-exact",
                                const ModelOptions& mo = {});

/// The non-CPU backends a model-level test runs on: the test-only "f16-ref" backend, then every
/// device PERFX_TEST_DEVICE names other than "cpu" and "f16-ref" (e.g. cuda:0, opencl), in order.
std::vector<std::string> non_cpu_test_devices();
/// "cpu", then non_cpu_test_devices(): every backend a model-level test runs on.
std::vector<std::string> all_test_devices();

/// Reads input_ids (i32 [T]) and logits (f32 [T, V]) from a reference_logits.safetensors file.
void read_reference(const std::string& path, std::vector<int32_t>* ids, std::vector<float>* logits,
                    int64_t* vocab);

/// max |a - b|.
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace perfx::test
