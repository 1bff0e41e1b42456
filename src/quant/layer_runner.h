// Runs one decoder layer of the fp model through the model's own forward pass (LlamaModel, written
// once in src/model/) on calibration hidden states: captures every linear's input (FORMATS.md §1.2
// "per-layer inputs captured from the unquantized model") and evaluates AWQ's inspected blocks.
//
// How: a one-layer LlamaModel is built over in-memory tensors whose embedding table is the
// layer's input hidden states [N, hidden] (vocab = N, token t = row t), so forward() runs exactly
// the model's decoder layer on them; the LinearInputObserver captures the linears' inputs, and the
// block outputs are finished on the host (o_proj / down_proj, the two residual adds).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "perfx/model_config.h"
#include "quant/awq.h"

namespace perfx {
class ThreadPool;
}

namespace perfx::quant {

class ModelLayerRunner : public BlockRunner {
 public:
  /// cfg: the model's config (HF layout: rope_interleaved must be false). The calibration tokens
  /// form n_blocks independent causal sequences of seq_len tokens. pool may be null.
  ModelLayerRunner(const ModelConfig& cfg, Backend& backend, int n_blocks, int seq_len,
                   ThreadPool* pool);
  ~ModelLayerRunner() override;

  /// The current layer's input hidden states (residual stream) [n_blocks·seq_len, hidden]; must
  /// outlive the calls below.
  void set_input(const Matrix* x);
  /// Runs layer L (fp): X receives the inputs of all its linears, x_next the layer's output
  /// (the next layer's input).
  void capture(const DecoderLayerF32& L, LayerInputs& X, Matrix& x_next);

  void attention(const DecoderLayerF32& L, const LinearF32& q, const LinearF32& k,
                 const LinearF32& v, Matrix& out) override;
  void mlp(const DecoderLayerF32& L, const LinearF32& gate, const LinearF32& up,
           Matrix& out) override;

 private:
  enum class Stop { AfterAttention, AfterMlp, Never };
  /// Runs the layer over all calibration blocks (in chunks of sequences), calling `sink` for the
  /// captured linear inputs: name in {"qkv", "o", "gate_up", "down"}, first token row, tensor.
  void run(const DecoderLayerF32& L, const LinearF32& q, const LinearF32& k, const LinearF32& v,
           const LinearF32& gate, const LinearF32& up, Stop stop,
           const std::function<void(const std::string&, int64_t, const Tensor&)>& sink);

  ModelConfig cfg_;
  Backend& be_;
  int n_blocks_, seq_len_, blocks_per_chunk_;
  ThreadPool* pool_;
  const Matrix* x_ = nullptr;
  std::unique_ptr<KvStorage> kv_;
  std::vector<float> ones_;
};

}  // namespace perfx::quant
