// The CUDA backend's class, shared by the files that define its members (cuda_backend.h is the
// public entry point). One concern per file:
//   cuda_backend.cpp  construction, device memory, the batch layout's staging, CUDA graphs, the
//                     per-op profile, create_cuda_backend()
//   cuda_weights.cpp  weight upload and repacking, dense copies for large M, the KV cache
//   cuda_ops.cpp      the forward pass's ops onto the kernels of kernels.h, linear.cuh,
//                     attention.cuh and rope_kv.cuh
//   cuda_sampling.cpp sampling on the GPU: penalties, argmax and draws, the graph argmax, ids back
// Internal to src/backend/cuda: nothing outside these files includes it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cublas_dl.h"
#include "backend/cuda/graph_cache.h"
#include "backend/cuda/l2_prefetch_plan.h"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/trace_ring.h"
#include "core/quantized.h"
#include "perfx/status.h"

namespace perfx::cuda::backend_impl {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(e) + " (" +
                cudaGetErrorString(e) + ")");
}

inline void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS error in ") + what + ": status " + std::to_string((int)s));
}

/// Runs `fn`, turning the kernels' std::exceptions (invalid_argument, runtime_error) into
/// perfx::Error naming the op.
template <typename F>
inline void guarded(const char* op, F&& fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(std::string("CUDA ") + op + ": " + e.what());
  }
}

/// Bumped whenever device memory that captured graphs may reference is freed or reallocated.
struct Generation {
  std::atomic<uint64_t> value{1};
};

/// An on/off environment switch: unset or empty = on, "1" = on, "0" = off; anything else throws
/// perfx::Error naming the variable.
inline bool env_switch(const char* name) {
  const char* e = std::getenv(name);
  const std::string v = e ? e : "";
  check(v.empty() || v == "0" || v == "1", std::string(name) + " must be 0 or 1, got '" + v + "'");
  return v != "0";
}

/// A device allocation (cudaMalloc) freed on destruction; the error message on failure names what
/// it was for, the bytes needed and the bytes free.
class DevMem {
 public:
  DevMem() = default;
  DevMem(size_t bytes, const std::string& what) { alloc(bytes, what); }
  ~DevMem() { reset(); }
  DevMem(DevMem&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DevMem& operator=(DevMem&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  /// Replaces the buffer with a new one of `bytes`: the new one is allocated first, so a failure
  /// (perfx::Error naming `what`, the bytes needed and free) leaves the old buffer as it was.
  void alloc(size_t bytes, const std::string& what) {
    void* p = device_malloc(bytes, what);
    reset();
    p_ = p;
    n_ = bytes;
  }
  void reset() {
    device_free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  void* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

class CudaBuffer : public Buffer {
 public:
  CudaBuffer(size_t bytes, std::shared_ptr<Generation> gen)
      : mem_(bytes, "a scratch buffer"), gen_(std::move(gen)) {}
  ~CudaBuffer() override { gen_->value++; }  // graphs may point into it
  void* data() override { return mem_.get(); }
  size_t size() const override { return mem_.size(); }

 private:
  DevMem mem_;
  std::shared_ptr<Generation> gen_;
};

class CudaWeight : public Weight {
 public:
  enum class Kind { Vector, Dense, W4, W8 };
  Kind kind = Kind::Dense;
  DevMem mem;  // Dense: act dtype [out, in] row-major; Vector: fp32 [out]
  std::unique_ptr<W4Weight> w4;
  std::unique_ptr<W8Weight> w8;
  bool interleaved = false;  // W4 gate|up packed W4RowOrder::kInterleave8 (linear_silu_mul only)
  // An attention op came right after this weight's linear (learned from the calls; the QKV
  // projection): with PERFX_CUDA_QKV_TRIGGER its w4_gemv3 lets attention launch early
  mutable bool feeds_attention = false;
  DevMem dense;  // W4 / W8: a dequantized copy [out, in] in the act dtype, or none (dense_copy())
  std::shared_ptr<Generation> freed;   // counts weights freed (the backend's L2 prefetch plan)
  std::shared_ptr<Generation> graphs;  // while L2 warming is on: the graph generation
  ~CudaWeight() override {
    if (freed) freed->value++;
    if (graphs) graphs->value++;  // captured graphs may warm this weight for another linear
  }
  size_t bytes() const override {
    if (w4) return w4->bytes();
    if (w8) return w8->bytes();
    return mem.size();
  }
  const float* vec() const { return static_cast<const float*>(mem.get()); }
};

/// The paged KV cache: per layer a K pool then a V pool, each [slots, n_kv_heads, head_dim] of
/// the activation dtype, or (q8: --cache-type-k/-v q8_0) int8 followed by its fp16 scales, one
/// per 32 elements (attention.cuh, PagedAttentionArgs::kv_q8). Regions start 256-byte aligned.
class CudaKv : public KvStorage {
 public:
  DevMem mem;
  size_t pool_elems = 0;  // elements per K (or V) pool of one layer
  bool q8 = false;
  static size_t round256(size_t b) { return (b + 255) & ~size_t(255); }
  size_t data_bytes() const { return round256(pool_elems * (q8 ? 1 : 2)); }
  size_t scale_bytes() const {  // one record of q8_scale_stride halves per (slot, KV head)
    return q8 ? round256(pool_elems / head_dim * (size_t)q8_scale_stride(head_dim) * 2) : 0;
  }
  size_t pool_bytes() const { return data_bytes() + scale_bytes(); }
  size_t bytes() const override { return mem.size(); }
  char* pool(int layer, int which) const {
    return static_cast<char*>(mem.get()) + (size_t)(2 * layer + which) * pool_bytes();
  }
  void* k(int layer) const { return pool(layer, 0); }
  void* v(int layer) const { return pool(layer, 1); }
  void* k_scale(int layer) const { return q8 ? pool(layer, 0) + data_bytes() : nullptr; }
  void* v_scale(int layer) const { return q8 ? pool(layer, 1) + data_bytes() : nullptr; }
};

class CudaRope : public RopeTable {
 public:
  DevMem inv_freq;  // fp32 [rot_dim / 2]
};

inline const CudaWeight& cw(const Weight& w) {
  return static_cast<const CudaWeight&>(w);
}

inline uint16_t to_act_bits(float v, DType act) {
  return act == DType::BF16 ? fp32_to_bf16(v) : fp32_to_fp16(v);
}

inline bool aligned16(const void* p) {
  return ((uintptr_t)p & 15) == 0;
}

/// Whether paged_attention's tensor-core kernels take this head size and these tensors (16-byte
/// aligned rows, strides a multiple of 8 elements); otherwise the plain attention kernel runs.
inline bool paged_attention_takes(int head_dim, std::initializer_list<Tensor> ts) {
  if (head_dim != 64 && head_dim != 80 && head_dim != 96 && head_dim != 128) return false;
  for (const Tensor& t : ts)
    if (!aligned16(t.data) || t.stride % 8 != 0) return false;
  return true;
}

/// Activations the W4 / W8 kernels take as they are: 16-byte aligned rows (others go through
/// dequantize + cuBLAS).
inline bool kernel_ready_x(const Tensor& x) {
  return aligned16(x.data) && x.stride % 8 == 0;
}

inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int dev);
  ~CudaBackend() override;

  std::string name() const override { return "cuda:" + std::to_string(dev_); }
  DType act_dtype() const override { return act_; }
  bool reads_host_weights() const override { return false; }
  bool device_memory(size_t* free_b, size_t* total_b) const override;

  // ---------------------------------------------------------------------------------------------
  // memory

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  void to_device(void* dst, const void* src, size_t bytes) override;
  void to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  /// Waits for the stream and the side streams (PERFX_CUDA_ASIDE_COPIES); the first error.
  cudaError_t sync_streams();

  // ---------------------------------------------------------------------------------------------
  // weights

  std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) override;

  /// W4 gate|up weights are packed interleaved (rows 8b..8b+7 of gate and of up in one 16-row
  /// block), so w4_gemv3's epilogue applies SwiGLU (linear_silu_mul); other kinds are stacked.
  std::unique_ptr<Weight> load_gate_up(const std::vector<LinearSource>& parts) override;

  std::unique_ptr<Weight> load_linear_ordered(const std::vector<LinearSource>& parts,
                                              W4RowOrder order);
  std::unique_ptr<Weight> load_vector(const TensorView& v) override;
  std::unique_ptr<Weight> load_embedding(const TensorView& table) override;
  std::unique_ptr<RopeTable> load_rope(const RopeParams& p) override;
  double kv_bytes_per_token(int n_kv_heads, int head_dim, const KvCacheTypes& types) const override;
  void check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const override;
  std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size, int n_kv_heads,
                                       int head_dim, const KvCacheTypes& types) override;

  // ---------------------------------------------------------------------------------------------
  // the step's layout

  void prepare_batch(const BatchLayout& b) override;

  // ---------------------------------------------------------------------------------------------
  // ops

  void embedding(const Weight& table, const BatchLayout& b, Tensor out) override;
  void rms_norm(Tensor x, const Weight& w, float eps, Tensor out) override;
  void add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps, Tensor out) override;
  void linear(Tensor x, const Weight& wt, const Weight* bias, Tensor y) override;
  void rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                     const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kvs,
                     int layer, const BatchLayout& b) override;
  void attention(Tensor q, const KvStorage& kvs, int layer, int n_q_heads, float scale,
                 const BatchLayout& b, Tensor out) override;

  /// The split-KV kernel with RoPE + KV store in its prologue (PagedAttentionArgs::rope) where
  /// every sequence is on it (q_len * group <= 16: decode) and the shapes take the tensor-core
  /// kernels; otherwise the two ops. PERFX_CUDA_ROPE_FUSED=0 always runs the two ops.
  void rope_kv_attention(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                         const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kvs,
                         int layer, float scale, const BatchLayout& b, Tensor out) override;

  /// paged_attention's arguments for this step's layout (the tensor-core kernels' path).
  PagedAttentionArgs paged_args(Tensor q, const CudaKv& kv, int layer, int n_q_heads, float scale,
                                Tensor out) const;

  void silu_mul(Tensor gate_up, Tensor out) override;
  void linear_silu_mul(Tensor x, const Weight& wt, const Weight* bias, Tensor gu,
                       Tensor act) override;

  /// The down projection, residual add and next input norm + QKV projection. With
  /// PERFX_CUDA_NORM_FUSE=1, at decode sizes where both weights run w4_gemv (v1), two linked
  /// GEMVs (linear_w4a16_norm_pair: the add in the first's epilogue, the norm in the second's
  /// prologue; y1 and h are not written); otherwise the three ops.
  void linear_add_rms_norm_linear(Tensor x, const Weight& w1t, const Weight* b1, Tensor y1,
                                  Tensor residual, const Weight& norm_w, float eps, Tensor h,
                                  const Weight& w2t, const Weight* b2, Tensor y2) override;

  /// Attention follows the latest linear directly (only RoPE + KV store may sit between): that
  /// weight feeds attention from now on (CudaWeight::feeds_attention).
  void mark_feeds_attention();

  /// What the GEMV of `w` reads into L2 before its PDL wait (w4_gemv3 and w4_gemv), for the linear
  /// right after attention only (its wait spans attention, which leaves DRAM idle): the first
  /// l2_prefetch_cap_ bytes of the linear that followed `w` last time (l2_prefetch_plan.h) — by
  /// default only where that weight is at most twice the cap (§26: TinyLlama's gate|up gained,
  /// 7B's lost at every size), and only for one token (M = 1: TinyLlama at batch 8 measured
  /// −1.1 and −1.4 %, as 7B's 32 attention CTAs lost). Empty when off, the first time round, and
  /// after any weight was freed (the plan starts again); a successor learned anew makes captured
  /// graphs stale. Call once per linear, in launch order, with its token count M.
  L2Prefetch l2_prefetch_after(const CudaWeight& w, int M);

  /// y = x · Wᵀ (+ bias) for a W4 or W8 weight (checked by the caller): the weight's dequantized
  /// copy on cuBLAS where it has one and M reaches the ladder's dense rung (or x is not
  /// kernel-ready), else the linear_w4a16 / linear_w8a16 ladder, or dequantize + cuBLAS when x is
  /// not 16-byte aligned with a stride that is a multiple of 8.
  /// trigger_pct: w4_gemv3's early trigger for this call (0: the configured default).
  void quant_linear(const CudaWeight& w, const Tensor& x, const Tensor& y, const float* b,
                    const L2Prefetch& pf = {}, int trigger_pct = 0);

  void gather_rows(Tensor x, const BatchLayout& b, Tensor out) override;
  void sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) override;
  static void check_sample_rows(const Tensor& logits, const std::vector<SampleRow>& rows);

  // Overlapped decode: the draw is queued behind the step; its ids stay on the device for the
  // next fed step, BatchLayout::fed_rows (in ids_out_ when the graph's argmax drew them, else in
  // the slot's device buffer; prepare_batch copies or gathers them into ids_[par_]), and travel to
  // the slot's pinned buffer, which sample_end reads after the slot's event.
  bool samples_ahead() const override { return true; }
  uint64_t graphs_captured() const override { return graphs_captured_; }
  bool queues_work() const override { return true; }
  void sample_begin(Tensor logits, const std::vector<SampleRow>& rows) override;
  void sample_end(int32_t* ids) override;

 private:
  enum class State { Eager, Capturing, Replaying };

  // ---- every op's scope: its GPU, its time (PERFX_CUDA_PROFILE=1), a capture it breaks off
  /// Constructed first thing in every op that launches work (after its replay check). It makes
  /// this backend's GPU the calling thread's current device (the CUDA runtime keeps one per
  /// thread, and a server steps the engine on its own thread: use_device); under
  /// PERFX_CUDA_PROFILE=1 it brackets the op with events (unless `name` is empty), summed per op
  /// name and printed when the backend ends; and when the op throws while a decode step is being
  /// captured, it discards the capture (abandon_capture), so that the next prepare_batch does not
  /// instantiate, cache and replay a graph of half a step.
  struct OpScope {
    CudaBackend& be;
    size_t at = SIZE_MAX;
    int uncaught = std::uncaught_exceptions();
    OpScope(CudaBackend& b, std::string name) : be(b) {
      be.use_device();
      if (!be.profile_ || name.empty())
        return;  // "": an op that calls timed ops (not counted twice)
      at = be.prof_next(std::move(name));
    }
    ~OpScope() {
      if (at != SIZE_MAX) (void)cudaEventRecord(be.prof_[at].stop, be.stream_);
      if (std::uncaught_exceptions() > uncaught) be.abandon_capture();
    }
  };
  struct ProfRecord {
    std::string name;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  size_t prof_next(std::string name);
  void prof_flush();
  static std::string linear_name(const Weight& w, int64_t M);
  void print_profile();

  // ---- graphs
  struct GraphKey {
    int n_tokens, width;
    uint64_t gen;
    bool fed;  // token ids read from ids_[par] (BatchLayout::fed_rows), not from the layout
    int par;   // the layout and ids buffers' parity (always 0 without PERFX_CUDA_ASIDE_COPIES)
    bool operator<(const GraphKey& o) const {
      return std::tie(n_tokens, width, gen, fed, par) <
             std::tie(o.n_tokens, o.width, o.gen, o.fed, o.par);
    }
  };
  struct GraphExec {
    cudaGraphExec_t exec = nullptr;
    bool argmax = false;  // ends with the greedy argmax of every row into ids_out_
  };

  bool replaying() const { return state_ == State::Replaying; }

  void begin_graph_step(int n_tokens, bool fed);

  /// Ends a capture (instantiating and launching the graph) or launches the graph being replayed.
  /// Called before anything that needs the step's results, and by the next prepare_batch.
  void finish_forward();

  /// Ends a capture without instantiating it (the step's op threw, or a launch failed): the
  /// graph is destroyed, the backend is eager again, and the step's work is dropped. No-op
  /// outside a capture; never throws.
  void abandon_capture() noexcept;

  /// Makes dev_ the calling thread's current CUDA device (cudaSetDevice is per host thread: the
  /// backend is built on one thread and a server steps it on another). Every public entry point
  /// that calls CUDA runs it first. Throws perfx::Error if the device cannot be made current.
  void use_device() const;

  void clear_graphs() { graphs_.clear(destroy_exec); }
  static void destroy_exec(const GraphExec& g) { (void)cudaGraphExecDestroy(g.exec); }

  // ---- helpers
  void launched(const char* op);

  /// Grows the pinned staging and the device batch arrays to n int32 (outside any capture). Every
  /// growth moves the layout the graphs point into, so every graph is captured again: they start
  /// at 64 Ki entries (256 KiB each), which hold a decode step of 256 sequences at 128 blocks of
  /// table (S · (7 + width) + 1 entries, S more when fed ids are gathered); growing from the first
  /// step's size, one sequence's staging grew at its 2nd, 9th, 17th and 65th blocks.
  void ensure_staging(size_t n);

  enum class RowState : uint8_t { Host, Picked, Penalized };

  /// One queued Backend::sample GPU part: where its ids land and which rows they belong to.
  struct SampleJob {
    int slot = 0;                    // SampleSlot (pinned + device buffers, event)
    size_t o_out = 0;                // byte offset of the ids in the slot's buffers
    const int32_t* out_d = nullptr;  // the ids on the device (greedy, softmax, top-k order)
    std::vector<size_t> greedy_at, soft_at, topk_at;  // row index of each id
    size_t n_rows = 0;
    bool ready = false;  // sample_begin picked on the host: ids below
    std::vector<int32_t> ids;
  };
  /// Pinned staging + device buffer pair. slot_for never hands out the slot of an outstanding
  /// sample_begin whose ids are still to be read, and waits for a slot's earlier copies (`done`
  /// follows the last of them) before its buffers are written again.
  struct SampleSlot {
    void* host = nullptr;
    size_t cap = 0;
    DevMem dev;
    cudaEvent_t done = nullptr;
  };
  /// The next slot, its buffers grown to `bytes` (waiting for its previous use first).
  SampleSlot& slot_for(size_t bytes, int& index);

  /// Whether this step's draw is the argmax inside its graph (PERFX_CUDA_GRAPH_ARGMAX, default
  /// 1): a graph step whose rows are greedy, without penalties, row i for token i. While the
  /// graph is captured the argmax is launched into it (PDL behind the lm_head, rows from the
  /// constant iota, ids into ids_out_, where a fed next step's embedding reads them); a replayed
  /// graph captured so runs it. Call before finish_forward().
  bool graph_argmax(const Tensor& logits, const std::vector<SampleRow>& rows);

  /// Queues the copy of ids_out_'s first n ids to a sampling slot; the job reads them there. With
  /// PERFX_CUDA_ASIDE_COPIES the copy runs on its own stream after the step, so the next step,
  /// queued behind this one, does not wait for it (it writes the other ids buffer).
  SampleJob copy_step_ids(int n);

  /// ids_[0], ids_[1] (the graph argmax's ids, a fed step's token ids; the second used with
  /// PERFX_CUDA_ASIDE_COPIES) and step_rows_ (0, 1, ...) for n tokens; growing them (outside any
  /// capture) invalidates the graphs. They start at 64 Ki entries (768 KiB in all with the side
  /// copies, 512 without): a server's fed steps carry prompt chunks beside the decodes (up to its
  /// step budget, 4,096 tokens by default), and each growth would re-capture every graph.
  void ensure_step_ids(int n);

  /// The ids of a job whose slot event has completed, into ids / state (see sample_enqueue).
  void sample_collect(const SampleJob& job, int32_t* ids, std::vector<RowState>& state);

  /// Queues Backend::sample's GPU part; false when it takes no row. For the rows it takes it
  /// applies the penalties in place, then
  /// picks: argmax for greedy rows, the softmax draw for rows with a temperature and no top-k /
  /// top-p / min-p, the top-k draw (top-p / min-p inside) for 1 <= top_k <= 1024 and for top-p /
  /// min-p without top-k (sample.cu; the reference sampler's arithmetic). After the slot's event,
  /// sample_collect sets state[i] to Picked
  /// (ids[i] written), Penalized (a row handed back: more than 1024 logits tie with its k-th, or
  /// its top-p / min-p cut lies past the 1024 most likely ids) or leaves Host (top_k > 1024;
  /// PERFX_CUDA_GPU_SAMPLING=0: every row with a temperature). Only ids cross to the host.
  bool sample_enqueue(const Tensor& logits, const std::vector<SampleRow>& rows, SampleJob& job);

  /// The linear kernels' workspace, at least `need` bytes. Growing it invalidates graphs; during a
  /// capture the old buffer is kept alive until the backend ends (a graph may reference it).
  Workspace workspace(size_t need);

  void* dequant_scratch(int64_t out, int64_t in);

  /// y [M, N] = x [M, K] · W[N, K]ᵀ (W in the activation dtype, row-major) + bias, on cuBLAS.
  void gemm(const void* W, int64_t N, int64_t K, const Tensor& x, const Tensor& y,
            const float* bias);

  void gemm_raw(const void* W, int64_t N, int64_t K, const void* x, int M, int64_t ldx, void* y,
                DType yt, int64_t ldy, const float* bias);
  static void dense_gemm_fn(void* ctx, const void* w_dense, int64_t N, int64_t K, const void* x,
                            DType, int M, int64_t ldx, void* y, DType yt, int64_t ldy,
                            const float* bias, cudaStream_t);

  /// Converts one dense source (F32/F16/BF16 or GGUF blocks, or int4 with mins) to the activation
  /// dtype on the host, chunk by chunk, and copies it to dst (device, [p.out, p.in]).
  void upload_dense_rows(const LinearSource& p, uint16_t* dst);

  /// Keeps a dequantized copy of a W4 / W8 weight (the activation dtype, [out, in], the packed row
  /// order) for the ladder's Dense rung (w4a16_plan / w8a16_plan: batched decode of >= 65
  /// sequences for W4, > 8 for W8, and prefill), which then runs cuBLAS on it instead of
  /// dequantizing the whole matrix on every call (out · in · 2 bytes written and read again per
  /// call; the copy is made by the same kernel, so the results are bit for bit those of the
  /// per-call path). PERFX_CUDA_DENSE_WEIGHTS: "auto" (default) while all copies together take at
  /// most kDenseShare of the GPU's memory (a 7B model on an 80 GB or larger GPU; they are made
  /// before the KV cache is sized from the free memory), "1" for every weight (out of memory is
  /// then an error), "0" never.
  void dense_copy(CudaWeight& w);

  /// The host copies are not needed once on the GPU: drop their pages (mmapped checkpoints).
  static void release_sources(const std::vector<LinearSource>& parts);

  static constexpr size_t kMaxGraphs = 512;
  static constexpr size_t kL2WarmAutoMiB = 8;  // l2_prefetch_after's default (§26)
  static constexpr double kDenseShare = 0.2;   // dense_copy(): auto's share of the GPU's memory

  int dev_;
  std::string gpu_name_;
  DType act_ = DType::F16;
  bool graphs_enabled_ = true;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t staged_[2] = {};  // the upload of layout buffer p has read pinned_[p]
  const CublasApi* blas_;  // the process's cuBLAS (cublas_dl.h), loaded before anything is made
  cublasHandle_t cublas_ = nullptr;
  DevMem cublas_ws_, attn_ws_, attn_counters_, linear_ws_, step_rows_;
  // PERFX_CUDA_ASIDE_COPIES (docs/cuda_linear_notes.md §33): the step's layout goes up on
  // up_stream_ and the graph argmax's ids come down on copy_stream_, off the stream's critical
  // path, through two of each buffer used in turn (par_; graphs keyed by it). Without it only
  // the buffers [0] are used, on stream_.
  bool aside_ = true;
  int n_bufs() const { return aside_ ? 2 : 1; }  // of each per-step buffer below
  int par_ = 0;
  DevMem batch_dev_[2], ids_[2];
  int32_t* ids_out_ = nullptr;  // where this step's graph argmax writes its ids
  cudaStream_t up_stream_ = nullptr, copy_stream_ = nullptr;
  cudaEvent_t used_[2] = {}, ids_copied_[2] = {}, fwd_done_ = nullptr;
  size_t step_ids_cap_ = 0;
  enum {
    kSkipNorm = 1,
    kSkipRope = 2,
    kSkipAttn = 4,
    kSkipLinear = 8,
    kSkipUpload = 16,
    kSkipIds = 32
  };
  cudaStream_t side_stream_ = nullptr;       // PERFX_CUDA_SKIP=upload's stream
  int skip_ = 0;                             // PERFX_CUDA_SKIP (timing only)
  const CudaWeight* last_linear_ = nullptr;  // the latest linear's weight (mark_feeds_attention)
  std::unique_ptr<TraceRing> trace_;         // PERFX_CUDA_TRACE (trace builds only)
  bool rope_fused_ = true;  // PERFX_CUDA_ROPE_FUSED: RoPE + KV store inside split-KV attention
  bool attn_merge_ = true;  // PERFX_CUDA_ATTN_MERGE: split-KV's last CTA merges (no reduce kernel)
  bool norm_fuse_ = false;  // PERFX_CUDA_NORM_FUSE: the decode pair around the norm as linked GEMVs
  std::vector<DevMem> retired_;
  std::shared_ptr<Generation> gen_;
  std::shared_ptr<Generation> weights_freed_ = std::make_shared<Generation>();
  // L2 warming after attention (l2_prefetch_after): bytes, and whether the size rule applies
  size_t l2_prefetch_cap_ = kL2WarmAutoMiB << 20;
  bool l2_prefetch_auto_ = true;       // PERFX_CUDA_L2_PREFETCH unset
  bool after_attention_ = false;       // an attention op ran since the latest linear
  bool prev_after_attention_ = false;  // the latest linear came right after attention
  L2PrefetchPlan l2_plan_;
  uint64_t l2_plan_freed_ = 0;
  DenseGemm dense_gemm_{&CudaBackend::dense_gemm_fn, this};
  size_t dense_budget_ = 0, dense_total_ = 0;  // dense_copy(): bytes allowed / made
  int64_t vocab_ = 0;

  // staging
  void* pinned_[2] = {};
  size_t staging_cap_ = 0;
  SampleSlot slots_[2];
  int next_slot_ = 0;
  std::deque<SampleJob> pending_;   // sample_begin's jobs, oldest first
  const int32_t* fed_d_ = nullptr;  // the last sample_begin's ids on the device (row order)
  int fed_n_ = 0;
  std::vector<std::pair<float, int32_t>> sample_scratch_;

  // the prepared step
  std::vector<int32_t> q_start_, kv_len_;
  const int32_t *ids_d_ = nullptr, *pos_d_ = nullptr, *slots_d_ = nullptr, *rows_d_ = nullptr,
                *seq_d_ = nullptr;
  const int32_t *q_start_d_ = nullptr, *kv_len_d_ = nullptr, *tables_d_ = nullptr;
  int n_tokens_ = 0, n_seqs_ = 0, max_q_ = 0, max_kv_ = 0, width_ = 1;
  uint64_t graphs_captured_ = 0;  // instantiated decode graphs, ever (graphs_captured())
  bool decode_only_ = false, graph_step_ = false;

  // profiling
  bool profile_ = false;
  std::vector<ProfRecord> prof_;
  size_t prof_used_ = 0;
  std::map<std::string, std::pair<int64_t, double>> prof_sum_;

  // graphs
  State state_ = State::Eager;
  GraphCache<GraphKey, GraphExec> graphs_{kMaxGraphs};  // least recently replayed evicted
  cudaGraphExec_t replay_ = nullptr;
  bool replay_argmax_ = false;   // the graph being replayed ends with the greedy argmax
  bool capture_argmax_ = false;  // the graph being captured does
  GraphKey capture_key_{0, 0, 0, false, 0};
};

}  // namespace perfx::cuda::backend_impl
