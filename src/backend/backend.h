// The op interface every backend (cpu, cuda, opencl) implements. The model's forward pass
// (src/model/llama.cpp) is written once against it. Ops take device tensors; a backend never knows
// which model family it runs, nor which checkpoint format its weights came from. Every op has a
// plain reference in backend/cpu/reference.{h,cpp}, and tests/unit/backend/conformance_test.cpp
// drives every op of any backend through create_backend() against those references.
//
// Activations live in the backend's activation dtype (act_dtype(): F32 on the CPU, F16 or BF16 on a
// GPU); logits are F32 on every backend. Unless an op says otherwise, its tensors have that dtype.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/quantized.h"
#include "core/tensor.h"
#include "perfx/status.h"

namespace perfx {

/// A 2-D tensor in the backend's memory: `rows` × `cols` elements of `dtype`, rows `stride`
/// elements apart (stride >= cols). Non-owning.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, stride = 0;

  /// Columns [c0, c0 + n) of every row (a strided view).
  Tensor cols_view(int64_t c0, int64_t n) const;
  /// Rows [r0, r0 + n).
  Tensor rows_view(int64_t r0, int64_t n) const;
  float* f32() const { return static_cast<float*>(data); }
  /// Bytes from the first element to one past the last (rows − 1 full strides plus one row).
  size_t span_bytes() const;
};

/// Memory owned by a backend.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
};

/// Where a linear layer's weight comes from on the host: either `weight` [out, in] in a stored
/// dtype (F32/F16/BF16, or GGUF Q8_0/Q4_0/Q4_1 blocks read in place; core/quantized.h decodes the
/// blocks for backends that repack them), or `int4`, a canonical group-quantized int4 matrix the
/// loader decoded from the checkpoint's packing (AutoAWQ GEMM/GEMV; formats/awq.h).
struct LinearSource {
  TensorView weight;                       // dense or GGUF blocks; empty data when int4
  std::shared_ptr<const Int4Matrix> int4;  // canonical int4; null when `weight` is used
  int64_t out = 0, in = 0;                 // filled by the loader for both kinds
  /// Set when the loader made `weight`'s bytes itself (e.g. an lm_head quantized at load) instead
  /// of pointing into the checkpoint: it owns them. A backend that still reads weight.data after
  /// load_linear returns (in place, not copied) keeps a reference; otherwise they are freed then.
  std::shared_ptr<const void> owner;
  bool is_int4() const { return int4 != nullptr; }
};

/// A weight repacked by a backend at load time into its kernels' layout. When made from several
/// LinearSource parts, their output rows are stacked in order (fused QKV, fused gate|up).
class Weight {
 public:
  virtual ~Weight() = default;
  int64_t out = 0, in = 0;
  /// Bytes of backend memory the weight occupies.
  virtual size_t bytes() const = 0;
};

/// Element types of a KV cache (llama.cpp's --cache-type-k / --cache-type-v: F32, F16, Q8_0).
/// Unset: the backend's activation dtype.
struct KvCacheTypes {
  std::optional<DType> k, v;
};

/// What check_kv (and so create_kv) throws for a KV cache type the backend does not store, or one
/// this model's shape rules out (e.g. q8_0 blocks of 32 over a head_dim of 8): the user's
/// --cache-type-k/-v (or --kv-cache-dtype) is at fault, not the memory, and the message names the
/// flag.
class KvTypeError : public Error {
 public:
  using Error::Error;
};

/// How a KV cache type refusal names the flags that set the type (llama.cpp's and vLLM's).
inline constexpr char kKvTypeFlags[] = "--cache-type-k/-v or --kv-cache-dtype";

/// Throws KvTypeError(msg) when cond is false.
inline void check_kv_type(bool cond, const std::string& msg) {
  if (!cond) throw KvTypeError(msg);
}

/// A KV cache type as the flags spell it (f32, f16, bf16, q8_0), for refusal messages.
inline std::string kv_type_name(DType t) {
  std::string s = dtype_name(t);
  for (char& ch : s) ch = (char)std::tolower((unsigned char)ch);
  return s;
}

/// The start of a refusal of KV cache type `t`: "KV cache type bf16 (--cache-type-k/-v or
/// --kv-cache-dtype) is not supported"; the backend says where and what it takes.
inline std::string kv_type_unsupported(DType t) {
  return "KV cache type " + kv_type_name(t) + " (" + kKvTypeFlags + ") is not supported";
}

/// The q8_0 cache's rule on every backend that stores one: blocks of 32 values along head_dim
/// (GGUF Q8_0), so head_dim must be a multiple of 32; throws KvTypeError naming the flags.
inline void check_kv_q8_head_dim(DType t, int head_dim) {
  check_kv_type(t != DType::Q8_0 || head_dim % 32 == 0,
                std::string("KV cache type q8_0 (") + kKvTypeFlags +
                    ") needs a head_dim that is a multiple of 32 (this model's is " +
                    std::to_string(head_dim) + ")");
}

/// check_kv's shape refusal for a non-positive n_kv_heads or head_dim (a caller's bug: a model's
/// config is validated before).
inline void check_kv_shape(int n_kv_heads, int head_dim) {
  if (n_kv_heads <= 0 || head_dim <= 0)
    throw Error("check_kv: n_kv_heads " + std::to_string(n_kv_heads) + " and head_dim " +
                std::to_string(head_dim) + " must be positive");
}

/// create_kv's refusal for counts below 1 (a caller's bug).
inline void check_kv_counts(int n_layers, int n_blocks, int block_size) {
  if (n_layers <= 0 || n_blocks <= 0 || block_size <= 0)
    throw Error("create_kv: n_layers " + std::to_string(n_layers) + ", n_blocks " +
                std::to_string(n_blocks) + " and block_size " + std::to_string(block_size) +
                " must be positive");
}

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
/// Invariants (Engine::step builds it so; prepare_batch may check): the tokens of one sequence
/// are contiguous rows in sequence order with consecutive positions, and the last of them is the
/// sequence's newest token (so the sequence holds positions[last] + 1 keys after the step).
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
  /// Overlapped decode (Backend::sample_begin): empty, or [n_tokens] where fed_rows[t] = r >= 0
  /// makes token t's id the one the last sample_begin drew for its row r, still on the backend
  /// (token_ids[t] is then a placeholder the backend must not read), and -1 takes token_ids[t].
  /// Any subset of that sample's rows, in any order (vLLM's async scheduling: sequences that end
  /// drop out, new ones join with host tokens). Only on a backend whose samples_ahead() is true.
  std::vector<int32_t> fed_rows;
  bool fed() const { return !fed_rows.empty(); }
};

/// RoPE parameters (HF modeling_rope_utils.py; FORMATS.md §5.2–5.3), resolved on the host.
struct RopeParams {
  int head_dim = 0;
  int rot_dim = 0;                // rotated dims (head_dim · partial_rotary_factor)
  bool interleaved = false;       // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
  std::vector<float> inv_freq;    // [rot_dim / 2]
  float attention_factor = 1.0f;  // cos/sin multiplier (yarn)
  bool operator==(const RopeParams&) const = default;
};

/// A RoPE table a backend built once from RopeParams (load_rope); the angle of pair i at position p
/// is p · inv_freq[i] in fp32, cos/sin scaled by attention_factor.
class RopeTable {
 public:
  virtual ~RopeTable() = default;
  RopeParams params;
};

/// How to pick one token from one row of logits (Backend::sample). The random draw and the
/// penalty history come from the host (runtime/Sampler), so every backend picks the same token for
/// the same seed where the arithmetic allows.
/// Order (llama.cpp's default chain): penalties → greedy (temperature <= 0) or top-k → temperature
/// → softmax → top-p → min-p → draw with `u`.
struct SampleRow {
  float temperature = 0;  // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 0;          // <= 0: off
  float top_p = 1;        // >= 1: off
  float min_p = 0;        // <= 0: off
  float repeat_penalty =
      1;  // CTRL (Keskar et al. 2019): l > 0 ? l / r : l · r, for each id in repeat_ids
  float presence_penalty = 0;                   // OpenAI: l −= presence for each id in counts
  float frequency_penalty = 0;                  // OpenAI: l −= frequency · count
  double u = 0;                                 // uniform draw in [0, 1) (unused when greedy)
  int row = 0;                                  // row of the logits tensor to sample
  std::vector<int32_t> repeat_ids;              // distinct ids, any order
  std::vector<std::pair<int32_t, int>> counts;  // (id, count > 0), distinct ids
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu", "cuda:0", ...
  virtual std::string name() const = 0;
  /// The dtype of activations, scratch tensors and the KV cache (F32, F16 or BF16).
  virtual DType act_dtype() const = 0;

  // ---- memory
  /// Backend memory of `bytes` bytes (contents undefined). Throws perfx::Error when out of memory,
  /// naming the bytes needed and free.
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  /// Blocks until queued work is done (CPU: no-op).
  virtual void synchronize() = 0;
  /// True when weights are read from the host views given at load (the CPU reads mmapped
  /// checkpoints in place), so the checkpoint must outlive the backend's weights; false when the
  /// backend copied them (a GPU), so the loader may release the host copy.
  virtual bool reads_host_weights() const { return true; }
  /// Free and total device memory in bytes, when the device has its own (a GPU); false otherwise.
  virtual bool device_memory(size_t* free_bytes, size_t* total_bytes) const {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }

  // ---- weights (repacked at load)
  /// A linear layer from one or more sources stacked by output rows. All parts share `in`.
  /// Throws perfx::Error for an unsupported dtype or mismatched shapes.
  virtual std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) = 0;
  /// The SwiGLU MLP's fused gate|up projection from parts {gate [I, in], up [I, in]}, for
  /// linear_silu_mul only: a backend may store the rows in its own order (CUDA interleaves them so
  /// one GEMV epilogue applies SwiGLU), so linear() on it may throw. Default: load_linear(parts).
  virtual std::unique_ptr<Weight> load_gate_up(const std::vector<LinearSource>& parts) {
    return load_linear(parts);
  }
  /// A 1-D vector (norm weight, bias) of `n` elements, any float dtype; kept in fp32.
  virtual std::unique_ptr<Weight> load_vector(const TensorView& v) = 0;
  /// An embedding table [vocab, hidden] (any dtype load_linear accepts as `weight`; rows read by
  /// id).
  virtual std::unique_ptr<Weight> load_embedding(const TensorView& table) = 0;
  /// The RoPE table for `p`, built once (the model rebuilds it only when p changes: dynamic NTK).
  virtual std::unique_ptr<RopeTable> load_rope(const RopeParams& p) = 0;
  /// Whether this backend stores a KV cache of `types` (unset: act_dtype()) for `n_kv_heads` ×
  /// `head_dim`, before any memory is sized or allocated: throws KvTypeError for a type it does not
  /// store or the shape rules out (naming the flags and the type), perfx::Error for a shape it
  /// cannot store at all (naming the backend and head_dim). The CPU stores F32, F16 and Q8_0
  /// (Q8_0: head_dim a multiple of 32); CUDA its activation dtype or Q8_0 (K and V alike; Q8_0:
  /// head_dim a multiple of 32) for an even head_dim of at most 256; OpenCL its activation dtype
  /// for a head_dim that is a multiple of 4, at most 256.
  virtual void check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const = 0;
  /// KV storage, K and V in `types` (default: act_dtype()): check_kv's refusals first, then
  /// perfx::Error when it does not fit (naming bytes needed/free) or for counts (n_layers,
  /// n_blocks, block_size) below 1.
  virtual std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size,
                                               int n_kv_heads, int head_dim,
                                               const KvCacheTypes& types = {}) = 0;
  /// Bytes one token's K and V take in one layer of a cache create_kv would make with these
  /// types (unset: the activation dtype). Default: the types' GGUF sizes (Q8_0 34 per 32 values);
  /// a backend with another layout says its own. Used to size a device's cache from free memory.
  virtual double kv_bytes_per_token(int n_kv_heads, int head_dim, const KvCacheTypes& types) const;

  // ---- ops
  /// Makes the step's layout visible to the device (CPU: no-op). Throws perfx::Error for a token id
  /// outside the embedding table or a slot outside the KV cache.
  virtual void prepare_batch(const BatchLayout& b) = 0;
  /// out[t, :] = table[ids[t], :]; out [n_tokens, hidden]. ids from the prepared batch.
  virtual void embedding(const Weight& table, const BatchLayout& b, Tensor out) = 0;
  /// out = x / sqrt(mean(x²) + eps) * w, per row (HF LlamaRMSNorm, fp32 arithmetic). x, out [T, n];
  /// w [n].
  virtual void rms_norm(Tensor x, const Weight& w, float eps, Tensor out) = 0;
  /// residual += x; out = rms_norm(residual) * w. Fused residual add + RMSNorm (residual, x, out
  /// [T, n]; the sum is rounded to the activation dtype before the norm).
  virtual void add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps, Tensor out) = 0;
  /// y [T, W.out] = x [T, W.in] · Wᵀ (+ bias [W.out]), fp32 accumulation. y is act_dtype() or F32
  /// (logits).
  virtual void linear(Tensor x, const Weight& w, const Weight* bias, Tensor y) = 0;
  /// Per token t, in this order: when q_norm/k_norm are given (Qwen3), RMSNorm of every head of q
  /// and k over head_dim with weight [head_dim]; RoPE of every head of q (in place) and k at
  /// positions[t]; then the rotated k and v [T, n_kv_heads*head_dim] are written into slot
  /// slots[t] of `layer`. q [T, n_q_heads*head_dim]. Afterwards k's contents are unspecified (a
  /// backend may rotate it in place or leave it); v is unchanged.
  virtual void rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                             const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kv,
                             int layer, const BatchLayout& b) = 0;
  /// Causal attention over the paged cache (GQA: query head h uses kv head h / (n_q_heads /
  /// n_kv_heads)). Token t sees keys at positions 0..positions[t] of its sequence. scale =
  /// 1/sqrt(head_dim). q, out [T, n_q_heads*head_dim]; softmax in fp32.
  virtual void attention(Tensor q, const KvStorage& kv, int layer, int n_q_heads, float scale,
                         const BatchLayout& b, Tensor out) = 0;
  /// out [T, I] = silu(gate_up[:, :I]) * gate_up[:, I:], gate_up [T, 2I] (SwiGLU).
  virtual void silu_mul(Tensor gate_up, Tensor out) = 0;
  /// out [n, cols] = x[rows[i], :] for the batch's logit_rows.
  virtual void gather_rows(Tensor x, const BatchLayout& b, Tensor out) = 0;
  // ---- fused pairs (a backend may override them with one kernel; the defaults run the two ops)
  /// rope_kv_store(q, k, v, ...) then attention(q, kv, layer, n_q_heads, scale, b, out), with the
  /// same results (CUDA rotates inside its split-KV decode kernel, bit for bit). Afterwards q's
  /// contents are unspecified (rotated in place, or left as they were), as are k's.
  virtual void rope_kv_attention(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                                 const Weight* k_norm, float eps, const RopeTable& rope,
                                 KvStorage& kv, int layer, float scale, const BatchLayout& b,
                                 Tensor out) {
    rope_kv_store(q, k, v, n_q_heads, q_norm, k_norm, eps, rope, kv, layer, b);
    attention(q, kv, layer, n_q_heads, scale, b, out);
  }
  /// add_rms_norm(residual, x, norm_w, eps, h) then linear(h, w, bias, y): h [T, n] is written too.
  virtual void add_rms_norm_linear(Tensor residual, Tensor x, const Weight& norm_w, float eps,
                                   Tensor h, const Weight& w, const Weight* bias, Tensor y) {
    add_rms_norm(residual, x, norm_w, eps, h);
    linear(h, w, bias, y);
  }
  /// linear(x, w1, b1, y1), then add_rms_norm_linear(residual, y1, norm_w, eps, h, w2, b2, y2):
  /// a layer's last projection, the residual add and the next linear's input norm + projection.
  /// residual and y2 end as with those ops on the same backend (bit for bit: a backend that fuses
  /// them keeps the ops' rounding and summation order); y1 [T, n] and h [T, n] are scratch,
  /// contents afterwards unspecified (CUDA's fused decode pair writes neither:
  /// docs/cuda_linear_notes.md §30). Default: those ops.
  virtual void linear_add_rms_norm_linear(Tensor x, const Weight& w1, const Weight* b1, Tensor y1,
                                          Tensor residual, const Weight& norm_w, float eps,
                                          Tensor h, const Weight& w2, const Weight* b2, Tensor y2) {
    linear(x, w1, b1, y1);
    add_rms_norm_linear(residual, y1, norm_w, eps, h, w2, b2, y2);
  }
  /// act [T, I] = silu(x·W_gateᵀ + b_gate) * (x·W_upᵀ + b_up) for a weight from load_gate_up
  /// (bias [2I]: gate's, then up's; or null), each projection rounded to the activation dtype
  /// first, as linear then silu_mul (a backend may add the bias after that rounding instead of
  /// before). gu [T, 2I] is scratch (contents afterwards unspecified).
  /// Default: linear(x, w, bias, gu) then silu_mul(gu, act).
  virtual void linear_silu_mul(Tensor x, const Weight& w, const Weight* bias, Tensor gu,
                               Tensor act) {
    linear(x, w, bias, gu);
    silu_mul(gu, act);
  }

  /// Picks one token for each SampleRow from row `row` of `logits` (F32 [n, vocab]; the rows
  /// sampled may be modified) by SampleRow's rules and writes the ids to the host array `ids`
  /// [rows.size()]. Blocks until done. Throws perfx::Error "the model's logits are not finite …"
  /// when a sampled row holds a NaN or +inf before its penalties (cpu::sample_logits's rule; a
  /// penalty that overflows a finite logit leaves the largest float, not an error).
  virtual void sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) = 0;

  // ---- overlapped decode (vLLM's async scheduling, TensorRT-LLM's overlap scheduler): the next
  // step is queued before this step's ids reach the host, its token ids fed from the device.
  /// True when sample_begin / sample_end and BatchLayout::fed_rows are implemented.
  virtual bool samples_ahead() const { return false; }
  /// True when a step's ops and sample_begin return before the device has run them (a GPU
  /// stream), so the host can prepare the next step meanwhile; false when they run in the call
  /// (the CPU), where overlapping steps only delays each token's handling by a step.
  virtual bool queues_work() const { return false; }
  /// Decode-step graphs captured so far (CUDA graphs, one per step shape: tokens, block-table
  /// width, fed ids; again after an invalidation); 0 on backends that capture none. A capture
  /// costs milliseconds: `perfx bench` checks that none falls inside its timed repetitions. Read
  /// it from the thread that steps the engine.
  virtual uint64_t graphs_captured() const { return 0; }
  /// sample() without the wait: queues the draw of `rows` (each greedy or a plain temperature
  /// draw — no top-k / top-p / min-p, no penalties — so the backend always picks on its own) and
  /// keeps the ids for a next prepare_batch with fed_rows (fed_rows[t] = r feeds row r's id to
  /// token t). At most
  /// two samples are outstanding. Throws perfx::Error for a row it does not take, or when
  /// samples_ahead() is false.
  virtual void sample_begin(Tensor logits, const std::vector<SampleRow>& rows);
  /// Waits for the oldest outstanding sample_begin and writes its ids to the host array `ids`
  /// [its rows.size()]. Throws perfx::Error when none is outstanding, a kernel failed, or a row's
  /// logits held a NaN or +inf (as sample(); the step fed its ids embeds zeros for that row).
  virtual void sample_end(int32_t* ids);
  /// prepare_batch's check of b.fed_rows against the last sample_begin's row count `n_fed`
  /// (0: none kept). Throws perfx::Error naming the token and row at fault.
  static void check_fed_rows(const BatchLayout& b, int n_fed);
  /// True when sample_begin takes `r` (greedy or a plain temperature draw, no penalties).
  static bool samples_ahead_row(const SampleRow& r) {
    return (r.temperature <= 0 || (r.top_k <= 0 && r.top_p >= 1 && r.min_p <= 0)) &&
           (r.repeat_penalty == 1 || r.repeat_ids.empty()) &&
           ((r.presence_penalty == 0 && r.frequency_penalty == 0) || r.counts.empty());
  }
};

/// Creates a backend by name: "cpu", or a device compiled in ("cuda", "cuda:N", "opencl[:N]"), or
/// one added with register_backend. n_threads <= 0: all usable cores (CPU work). Throws
/// perfx::Error for an unknown or not-compiled-in device, naming the devices available.
std::unique_ptr<Backend> create_backend(const std::string& device, int n_threads);

/// Makes create_backend(name or "name:N") call `make(N, n_threads)` (N = 0 without a suffix).
/// For backends outside src/backend (tests). A later registration of the same name replaces it.
using BackendFactory = std::function<std::unique_ptr<Backend>(int index, int n_threads)>;
void register_backend(const std::string& name, BackendFactory make);

}  // namespace perfx
