// The Llama-family decoder (llama, mistral, qwen2, qwen3), written once against the Backend ops.
// Decoder layer (HF modeling_llama.py): h = x + o_proj(attn(rms_norm(x)));
// out = h + down(silu(gate(rms_norm(h))) * up(rms_norm(h))); then final norm and lm_head.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "perfx/model_config.h"
#include "model/weights.h"

namespace perfx {

struct LayerWeights {
  std::unique_ptr<Weight> attn_norm, ffn_norm;
  std::unique_ptr<Weight> qkv, qkv_bias;      // fused [q_dim + 2 kv_dim, hidden]
  std::unique_ptr<Weight> o, o_bias;          // [hidden, q_dim]
  std::unique_ptr<Weight> q_norm, k_norm;     // qwen3 [head_dim]
  std::unique_ptr<Weight> gate_up;            // fused [2 I, hidden] from load_gate_up (rows in
                                              // the backend's order: linear_silu_mul only)
  std::unique_ptr<Weight> down;               // [hidden, I]
  std::unique_ptr<Weight> gate_up_bias, down_bias;
};

/// Called with the input of every linear during forward() when set (AWQ calibration).
/// name: "qkv", "o", "gate_up", "down"; x [n_tokens, in].
using LinearInputObserver = std::function<void(int layer, const std::string& name, const Tensor& x)>;

/// How the weights load, beyond what the checkpoint says.
struct ModelOptions {
  /// Q8_0 or Q4_0: quantize a float (F32 / F16 / BF16) lm_head — or the embedding table it is tied
  /// to — to GGUF blocks of that type at load (gguf_blocks_from_float), as llama.cpp's
  /// llama-quantize --output-tensor-type does to a file: 1.0625 (Q8_0) or 0.5625 (Q4_0) bytes a
  /// weight instead of fp16's 2. Decode reads the lm_head once a token (Llama-2-7B: 262 MB of fp16
  /// in 3.70 GB). Unset, or an lm_head already in GGUF blocks: as stored.
  std::optional<DType> lm_head_type;
};

class LlamaModel {
 public:
  /// Uploads the checkpoint's weights to `backend` (repacked at load: fused QKV and gate|up).
  /// Throws perfx::Error for missing tensors or shape mismatches, naming the tensor.
  LlamaModel(const Checkpoint& ck, Backend& backend, const ModelOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  size_t weight_bytes() const;

  /// Runs the batch: writes K/V of every token into `kv` and returns the logits of the batch's
  /// logit_rows as a backend tensor (F32 [logit_rows.size(), vocab], valid until the next forward;
  /// work may still be queued: Backend::to_host / sample synchronize).
  Tensor forward(const BatchLayout& b, KvStorage& kv);
  /// Same, with the logits copied to the host ([logit_rows.size(), vocab], f32).
  void forward(const BatchLayout& b, KvStorage& kv, std::vector<float>& logits);
  /// Activations' dtype on this model's backend.
  DType act_dtype() const { return act_; }

  LinearInputObserver observer;

 private:
  void ensure_scratch(int n_tokens, int n_logits);
  /// The RoPE table for sequences up to seq_len tokens (rebuilt only when the parameters change).
  const RopeTable& rope_for(int64_t seq_len);

  ModelConfig cfg_;
  Backend& be_;
  DType act_;
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<Weight> embed_, final_norm_, lm_head_;
  bool lm_head_is_embed_ = false;  // tied embeddings
  std::vector<LayerWeights> layers_;
  std::vector<float> rope_freq_factors_;  // GGUF rope_freqs.weight (llama3), else empty
  // scratch
  int cap_tokens_ = 0, cap_logits_ = 0;
  std::unique_ptr<Buffer> buf_;
  Tensor x_, h_, qkv_, attn_, tmp_, gu_, act_t_, sel_, logits_;
};

}  // namespace perfx
