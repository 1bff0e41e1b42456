// AWQ (activation-aware weight quantization, arXiv 2306.00978) for one Llama-family decoder layer,
// as AutoAWQ's AwqQuantizer does it (FORMATS.md §1.3–§1.9): per-channel statistics, the α grid
// search for the scales of each scale group (duo scaling), folding the scales into the previous
// op, and the per-group weight clipping search. Model-independent: the layer's weights are host
// fp32 matrices and the attention / MLP blocks are evaluated through a BlockRunner.
//
// Arithmetic: fp32 throughout (AutoAWQ runs the search in the model dtype, usually fp16; the final
// quantization after the search is fp16-exact, see int4.h quantize_fp16).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace perfx {
class ThreadPool;
}

namespace perfx::quant {

/// A row-major fp32 matrix [rows, cols].
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
  Matrix() = default;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c), data(static_cast<size_t>(r * c), 0.0f) {}
  float* row(int64_t r) { return data.data() + r * cols; }
  const float* row(int64_t r) const { return data.data() + r * cols; }
};

/// One nn.Linear on the host: W [out, in] (HF orientation) and an optional bias [out].
struct LinearF32 {
  std::string name;  // module name, e.g. "model.layers.0.self_attn.q_proj"
  int64_t out = 0, in = 0;
  std::vector<float> w;
  std::vector<float> bias;  // empty when absent
  /// false: the linear is kept in fp16 (in % group_size != 0 or out % 8 != 0; listed in
  /// modules_to_not_convert). It still takes part in scale folding, which is exact.
  bool quantize = true;
};

/// One decoder layer on the host in fp32.
struct DecoderLayerF32 {
  std::vector<float> attn_norm, ffn_norm;  // [hidden] RMSNorm weights (input/post_attention)
  std::vector<float> q_norm, k_norm;       // [head_dim] Qwen3 only, else empty
  LinearF32 q, k, v, o, gate, up, down;
};

/// Inputs of the layer's linears captured from the fp model, one row per calibration token.
struct LayerInputs {
  Matrix attn;  // input of q/k/v_proj [N, hidden] (after input_layernorm)
  Matrix o;     // input of o_proj [N, q_dim]
  Matrix mlp;   // input of gate/up_proj [N, hidden] (after post_attention_layernorm)
  Matrix down;  // input of down_proj [N, intermediate]
};

/// Evaluates AWQ's `module2inspect` blocks (FORMATS.md §1.4) of a layer on the captured inputs.
class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  /// out [N, hidden] = self_attn(inputs.attn) with the given q/k/v weights (biases, q/k norms,
  /// o_proj and everything else from L), RoPE at the calibration positions and causal attention
  /// within each calibration block.
  virtual void attention(const DecoderLayerF32& L, const LinearF32& q, const LinearF32& k,
                         const LinearF32& v, Matrix& out) = 0;
  /// out [N, hidden] = mlp(inputs.mlp) = down(silu(gate(x)) · up(x)) with the given gate/up
  /// weights (down_proj from L).
  virtual void mlp(const DecoderLayerF32& L, const LinearF32& gate, const LinearF32& up,
                   Matrix& out) = 0;
};

struct AwqOptions {
  int w_bit = 4;
  int group_size = 128;
  bool duo_scaling = true;  // AutoAWQ default; false = llm-awq / paper (s = x_mean^α)
  int n_grid = 20;          // α ∈ {0, 1/20, …, 19/20}
  bool clip = true;
  float max_shrink = 0.5f;  // clip shrink factors 1.00, 0.95, …, 0.55
  int clip_n_grid = 20;
  int clip_n_tokens = 512;     // token subsample for the clip search
  ThreadPool* pool = nullptr;  // optional, parallelises matmuls and the clip search
};

/// What awq_layer decided, per scale group (1: qkv, 2: o, 3: gate/up, 4: down).
struct AwqLayerReport {
  float best_ratio[4] = {-1, -1, -1, -1};  // −1: group not used (2 under GQA)
  double best_loss[4] = {0, 0, 0, 0};
  double rtn_loss[4] = {0, 0, 0, 0};  // loss at s = 1 (plain RTN of the group), for reference
};

// ---- building blocks (exposed for tests) ----------------------------------------------------

/// y [N, out] = x [N, in] · Wᵀ (+ bias). Throws perfx::Error on a width mismatch.
void matmul_wt(const Matrix& x, const LinearF32& L, Matrix& y, ThreadPool* pool = nullptr);

/// x_mean[c] = mean_t |x[t, c]| (§1.3), accumulated in double.
std::vector<float> activation_mean(const Matrix& x);

/// w_mean[c] over the concatenated rows of `linears` (§1.3, duo scaling): each group of
/// group_size input channels of each row is divided by its max |w| + 1e-6, then averaged over all
/// rows. Requires in % group_size == 0 for all (else perfx::Error).
std::vector<float> weight_mean(const std::vector<const LinearF32*>& linears, int group_size);

/// The scales for ratio α (§1.5): duo: clamp(x_mean^α / (w_mean^(1−α) + 1e-4), 1e-4), else
/// clamp(x_mean^α, 1e-4); then divided by sqrt(max · min); inf/NaN entries set to 1.
std::vector<float> scales_for_ratio(const std::vector<float>& x_mean,
                                    const std::vector<float>& w_mean, float ratio, bool duo);

/// Mean over all elements of (a − b)², accumulated in double.
double mse(const Matrix& a, const Matrix& b);

/// Fake-quantizes `L` in the scaled domain in place: W ← Q(W · diag(s)) · diag(s)⁻¹ (§1.5), or
/// W ← Q(W) when s is empty. Linears with quantize == false are left unchanged.
void fake_quantize_scaled(LinearF32& L, const std::vector<float>& s, const AwqOptions& o);

/// The α grid search (§1.5). loss(s) must return the block's output MSE against the fp output
/// when the group's linears are fake-quantized with scales s. Returns the best s; `best_ratio`,
/// `best_loss`, `loss_at_zero` (s for α = 0) are filled when given. Throws perfx::Error when no
/// loss is finite.
std::vector<float> search_scales(const std::vector<float>& x_mean, const std::vector<float>& w_mean,
                                 const AwqOptions& o,
                                 const std::function<double(const std::vector<float>&)>& loss,
                                 float* best_ratio = nullptr, double* best_loss = nullptr);

/// Folds s into a scale group (§1.6): prev RMSNorm weight /= s (norm != nullptr) or the last
/// s.size() output rows (and bias) of prev_linear /= s; every next linear's columns *= s.
void apply_scales(const std::vector<float>& s, std::vector<float>* norm, LinearF32* prev_linear,
                  const std::vector<LinearF32*>& next);

/// Divides column c of x by s[c] (the cached inputs follow the scaled weights, §1.6).
void divide_columns(Matrix& x, const std::vector<float>& s);

/// The clip search (§1.7) for one linear on its (scaled) input x: max_val [out, G] per group.
std::vector<float> search_clip(const LinearF32& L, const Matrix& x, const AwqOptions& o);
/// W ← clamp(W, −max_val, max_val) per (row, group).
void apply_clip(LinearF32& L, const std::vector<float>& max_val, int group_size);

/// True when the linear's name excludes it from clipping (§1.7: q_, k_, query, key, Wqkv).
bool clip_excluded(const std::string& name);

// ---- one decoder layer ----------------------------------------------------------------------

/// Runs AWQ on layer L in place (§1.9 steps 2–3): searches the scales of the four groups on the
/// unscaled weights (group 2 only when v_proj and o_proj have the same shape, i.e. no GQA), folds
/// them all in, scales the cached inputs, then clips (when o.clip). The weights are left in fp32,
/// ready for quantize_fp16. X is modified (scaled).
void awq_layer(DecoderLayerF32& L, LayerInputs& X, BlockRunner& runner, const AwqOptions& o,
               AwqLayerReport* report = nullptr);

}  // namespace perfx::quant
