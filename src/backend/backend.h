// The op interface every backend (cpu, cuda, opencl) implements. The model's forward pass
// (src/model/llama.cpp) is written once against it. Ops take device tensors; a backend never knows
// which model family it runs. Every op has a plain reference in backend/cpu/reference.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace perfx {

/// A 2-D activation tensor in the backend's memory: `rows` × `cols` elements of `dtype`, rows
/// `stride` elements apart (stride >= cols). Non-owning.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, stride = 0;

  /// Columns [c0, c0 + n) of every row (a strided view).
  Tensor cols_view(int64_t c0, int64_t n) const;
  /// Rows [r0, r0 + n).
  Tensor rows_view(int64_t r0, int64_t n) const;
  float* f32() const { return static_cast<float*>(data); }
};

/// Memory owned by a backend.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
};

/// Where a linear layer's weight comes from on the host. Either a dense/block-quantized matrix
/// `weight` [out, in] (F32/F16/BF16/Q8_0/Q4_0/Q4_1, HF orientation), or AWQ W4A16 tensors
/// (FORMATS.md §2.3/§2.4): `qweight`, `qzeros`, `scales` in the AutoAWQ `awq_version` layout.
struct LinearSource {
  TensorView weight;  // dense; empty data when AWQ
  TensorView qweight, qzeros, scales;
  std::string awq_version;  // "gemm" | "gemv"; empty when dense
  int group_size = 128;
  int64_t out = 0, in = 0;  // filled by the loader for both kinds
  bool is_awq() const { return !awq_version.empty(); }
};

/// A weight matrix repacked by a backend at load time into its kernels' layout. When made from
/// several LinearSource parts, their output rows are stacked in order (fused QKV, fused gate|up).
class Weight {
 public:
  virtual ~Weight() = default;
  int64_t out = 0, in = 0;
  /// Bytes of backend memory the weight occupies.
  virtual size_t bytes() const = 0;
};

/// Paged KV cache storage for all layers: `n_blocks` blocks of `block_size` token slots; a slot
/// holds K and V for `n_kv_heads` × `head_dim`. Slot index = block * block_size + offset.
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  int n_layers = 0, n_blocks = 0, block_size = 0, n_kv_heads = 0, head_dim = 0;
  virtual size_t bytes() const = 0;
};

/// The shape of one forward step over a batch of sequences (vLLM-style flattened tokens).
/// Host arrays; a device backend copies what it needs in prepare_batch().
struct BatchLayout {
  int n_tokens = 0;
  std::vector<int32_t> token_ids;  // [n_tokens]
  std::vector<int32_t> positions;  // [n_tokens] absolute position of each token in its sequence
  std::vector<int32_t> slots;      // [n_tokens] KV slot the token's K/V are written to
  std::vector<int32_t> token_seq;  // [n_tokens] index of the token's sequence in this batch
  int n_seqs = 0;
  int max_blocks = 0;                 // block-table width
  std::vector<int32_t> block_tables;  // [n_seqs, max_blocks] physical block ids (-1 = none)
  std::vector<int32_t> logit_rows;    // token rows whose logits are wanted, in output order
};

/// RoPE parameters (HF modeling_rope_utils.py; FORMATS.md §5.2–5.3), resolved on the host.
struct RopeParams {
  int head_dim = 0;
  int rot_dim = 0;                 // rotated dims (head_dim · partial_rotary_factor)
  bool interleaved = false;        // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
  std::vector<float> inv_freq;     // [rot_dim / 2]
  float attention_factor = 1.0f;   // cos/sin multiplier (yarn)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;

  // ---- weights (repacked at load)
  /// A linear layer from one or more sources stacked by output rows. All parts share `in`.
  /// Throws perfx::Error for an unsupported dtype or mismatched shapes.
  virtual std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) = 0;
  /// A 1-D vector (norm weight, bias) of `n` elements, any float dtype; stored as f32.
  virtual std::unique_ptr<Weight> load_vector(const TensorView& v) = 0;
  /// An embedding table [vocab, hidden] (any dtype load_linear accepts; rows read by id).
  virtual std::unique_ptr<Weight> load_embedding(const TensorView& table) = 0;
  virtual std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size,
                                               int n_kv_heads, int head_dim) = 0;

  // ---- ops (all tensors F32 on the CPU backend)
  /// Makes the step's layout visible to the device (CPU: no-op).
  virtual void prepare_batch(const BatchLayout& b) = 0;
  /// out[t, :] = table[ids[t], :]; out [n_tokens, hidden]. ids from the prepared batch.
  virtual void embedding(const Weight& table, const BatchLayout& b, Tensor out) = 0;
  /// out = x / sqrt(mean(x²) + eps) * w, per row. x, out [T, n]; w [n].
  virtual void rms_norm(Tensor x, const Weight& w, float eps, Tensor out) = 0;
  /// residual += x; out = rms_norm(residual) * w. Fused residual add + RMSNorm.
  virtual void add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps, Tensor out) = 0;
  /// RMSNorm over each head: x [T, n_heads * head_dim] in place, w [head_dim] (Qwen3 q/k norm).
  virtual void head_rms_norm(Tensor x, int n_heads, int head_dim, const Weight& w, float eps) = 0;
  /// y [T, W.out] = x [T, W.in] · Wᵀ (+ bias [W.out]).
  virtual void linear(Tensor x, const Weight& w, const Weight* bias, Tensor y) = 0;
  /// Rotates q [T, n_q_heads*head_dim] and k [T, n_kv_heads*head_dim] in place at the batch's positions.
  virtual void rope(Tensor q, int n_q_heads, Tensor k, int n_kv_heads, const RopeParams& p,
                    const BatchLayout& b) = 0;
  /// Writes k, v [T, n_kv_heads*head_dim] into the batch's slots of `layer`.
  virtual void kv_store(KvStorage& kv, int layer, Tensor k, Tensor v, const BatchLayout& b) = 0;
  /// Causal attention over the paged cache (GQA: query head h uses kv head h / (n_q_heads / n_kv_heads)).
  /// Token t sees keys at positions 0..positions[t] of its sequence. scale = 1/sqrt(head_dim).
  /// q, out [T, n_q_heads*head_dim]; softmax in f32.
  virtual void attention(Tensor q, const KvStorage& kv, int layer, int n_q_heads, float scale,
                         const BatchLayout& b, Tensor out) = 0;
  /// out [T, I] = silu(gate_up[:, :I]) * gate_up[:, I:], gate_up [T, 2I] (SwiGLU).
  virtual void silu_mul(Tensor gate_up, Tensor out) = 0;
  /// out [n, cols] = x[rows[i], :] for the batch's logit_rows.
  virtual void gather_rows(Tensor x, const BatchLayout& b, Tensor out) = 0;
  /// Blocks until queued work is done (CPU: no-op).
  virtual void synchronize() = 0;
};

/// Creates a backend by name ("cpu"). n_threads <= 0: all cores. Throws perfx::Error for an unknown
/// or not-compiled-in device, naming the devices available.
std::unique_ptr<Backend> create_backend(const std::string& device, int n_threads);

}  // namespace perfx
