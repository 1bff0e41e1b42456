// Helpers for the model parity tests: run a checkpoint on token ids and compare with references.
#pragma once

#include <string>
#include <vector>

namespace perfx::test {

/// Logits [ids.size(), vocab] of the model at `path` (HF folder or GGUF) for one sequence, computed on
/// `device` (create_backend's name) through the same LlamaModel the Engine uses (no tokenizer).
/// Default "cpu-exact": the CPU backend's fp32-activation kernels (PERFX_ACT_QUANT=off), which the
/// parity tests against transformers use.
std::vector<float> model_logits(const std::string& path, const std::vector<int32_t>& ids, int64_t* vocab,
                                const std::string& device = "cpu-exact");

/// Reads input_ids (i32 [T]) and logits (f32 [T, V]) from a reference_logits.safetensors file.
void read_reference(const std::string& path, std::vector<int32_t>* ids, std::vector<float>* logits,
                    int64_t* vocab);

/// max |a - b|.
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace perfx::test
