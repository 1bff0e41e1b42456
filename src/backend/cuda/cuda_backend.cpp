// The CUDA backend (see cuda_backend.h). Host code: memory, weight upload and repacking, the op
// dispatch onto the kernels of kernels.h, linear.cuh, attention.cuh and rope_kv.cuh, sampling, and
// CUDA-graph capture / replay of decode steps.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/reference.h"
#include "backend/cpu/sampling.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cublas_dl.h"
#include "backend/cuda/graph_cache.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/l2_prefetch_plan.h"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/rope_kv.cuh"
#include "backend/cuda/trace_ring.h"
#include "core/mmap.h"
#include "core/quantized.h"
#include "perfx/status.h"

namespace perfx::cuda {
namespace {

std::string mib(size_t b) {
  return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB";
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(e) + " (" +
                cudaGetErrorString(e) + ")");
}

void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS error in ") + what + ": status " + std::to_string((int)s));
}

/// Runs `fn`, turning the kernels' std::exceptions (invalid_argument, runtime_error) into
/// perfx::Error naming the op.
template <typename F>
void guarded(const char* op, F&& fn) {
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
bool env_switch(const char* name) {
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
  DevMem(size_t bytes, const std::string& what, int dev) { alloc(bytes, what, dev); }
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
  void alloc(size_t bytes, const std::string& what, int dev) {
    reset();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw Error("out of GPU memory on cuda:" + std::to_string(dev) + ": " + what + " needs " +
                  mib(bytes) + ", " + mib(free_b) + " free of " + mib(total_b));
    }
    cuda_ok(e, "cudaMalloc");
    p_ = p;
    n_ = bytes;
  }
  void reset() {
    if (p_) (void)cudaFree(p_);
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
  CudaBuffer(size_t bytes, int dev, std::shared_ptr<Generation> gen)
      : mem_(bytes, "a scratch buffer", dev), gen_(std::move(gen)) {}
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

const CudaWeight& cw(const Weight& w) {
  return static_cast<const CudaWeight&>(w);
}

uint16_t to_act_bits(float v, DType act) {
  return act == DType::BF16 ? fp32_to_bf16(v) : fp32_to_fp16(v);
}

bool aligned16(const void* p) {
  return ((uintptr_t)p & 15) == 0;
}

/// Whether paged_attention's tensor-core kernels take this head size and these tensors (16-byte
/// aligned rows, strides a multiple of 8 elements); otherwise the plain attention kernel runs.
bool paged_attention_takes(int head_dim, std::initializer_list<Tensor> ts) {
  if (head_dim != 64 && head_dim != 80 && head_dim != 96 && head_dim != 128) return false;
  for (const Tensor& t : ts)
    if (!aligned16(t.data) || t.stride % 8 != 0) return false;
  return true;
}

/// Activations the W4 / W8 kernels take as they are: 16-byte aligned rows (others go through
/// dequantize + cuBLAS).
bool kernel_ready_x(const Tensor& x) {
  return aligned16(x.data) && x.stride % 8 == 0;
}

int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int dev)
      : dev_(dev), blas_(&cublas()), gen_(std::make_shared<Generation>()) {  // cuBLAS first
    cuda_ok(cudaSetDevice(dev_), "cudaSetDevice");
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, dev_), "cudaGetDeviceProperties");
    gpu_name_ = prop.name;
    check(prop.major >= 8, "cuda:" + std::to_string(dev_) + " (" + gpu_name_ +
                               ", compute capability " + std::to_string(prop.major) + "." +
                               std::to_string(prop.minor) +
                               ") is older than sm_80, which the CUDA backend needs");
    const char* dt = std::getenv("PERFX_CUDA_DTYPE");
    const std::string d = dt ? dt : "f16";
    check(d == "f16" || d == "bf16", "PERFX_CUDA_DTYPE must be f16 or bf16, got '" + d + "'");
    act_ = d == "bf16" ? DType::BF16 : DType::F16;
    const char* g = std::getenv("PERFX_CUDA_GRAPHS");
    graphs_enabled_ = !(g && std::string(g) == "0");
    const char* dw = std::getenv("PERFX_CUDA_DENSE_WEIGHTS");
    const std::string dws = dw && *dw ? dw : "auto";
    check(dws == "auto" || dws == "0" || dws == "1",
          "PERFX_CUDA_DENSE_WEIGHTS must be auto, 0 or 1, got '" + dws + "'");
    dense_budget_ = dws == "0"   ? 0
                    : dws == "1" ? SIZE_MAX
                                 : (size_t)((double)prop.totalGlobalMem * kDenseShare);
    // PERFX_CUDA_L2_PREFETCH=MiB: the GEMV right after attention reads the first MiB of the next
    // linear's weight into L2 before its PDL wait (for one token), whatever that weight's size;
    // 0: never; unset: kL2WarmAutoMiB, for a next weight of at most twice that, on Hopper (sm_90,
    // where it was measured: docs/cuda_linear_notes.md §26).
    if (const char* pf = std::getenv("PERFX_CUDA_L2_PREFETCH"); pf && *pf) {
      const std::string v = pf;
      const bool digits = v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 4;
      const int mib = digits ? std::stoi(v) : -1;
      check(mib >= 0 && mib <= 1024,
            "PERFX_CUDA_L2_PREFETCH must be a whole number of MiB from 0 to 1024, got '" + v + "'");
      l2_prefetch_cap_ = (size_t)mib << 20;
      l2_prefetch_auto_ = false;
    }
    if (l2_prefetch_auto_ && prop.major != 9) l2_prefetch_cap_ = 0;  // measured on Hopper only
    // PERFX_CUDA_SKIP=op[,op...] (profiling only: the output is wrong): leaves out every launch of
    // the named ops — norm (rms_norm, add_rms_norm), rope (rope_kv_store), attn (attention),
    // linear (linear, linear_silu_mul) — so a decode benchmark shows what each costs inside the
    // captured step (docs/cuda_linear_notes.md §12). Two more bound what the work between two
    // replayed steps costs (§33): upload (with PERFX_CUDA_ASIDE_COPIES=0 only: a replayed step's
    // layout goes up on a second stream, not ordered before the graph) and ids (the graph
    // argmax's ids are not copied to the host).
    if (const char* sk = std::getenv("PERFX_CUDA_SKIP"); sk && *sk) {
      std::string v = sk;
      for (size_t p = 0; p <= v.size();) {
        const size_t e = std::min(v.find(',', p), v.size());
        const std::string op = v.substr(p, e - p);
        const int bit = op == "norm"     ? kSkipNorm
                        : op == "rope"   ? kSkipRope
                        : op == "attn"   ? kSkipAttn
                        : op == "linear" ? kSkipLinear
                        : op == "upload" ? kSkipUpload
                        : op == "ids"    ? kSkipIds
                                         : 0;
        check(bit != 0,
              "PERFX_CUDA_SKIP takes norm, rope, attn, linear, upload and ids, comma-separated; "
              "got '" +
                  op + "'");
        skip_ |= bit;
        p = e + 1;
      }
    }
    rope_fused_ = env_switch("PERFX_CUDA_ROPE_FUSED");
    aside_ = env_switch("PERFX_CUDA_ASIDE_COPIES");
    check(!(aside_ && (skip_ & kSkipUpload)),
          "PERFX_CUDA_SKIP=upload bounds the stream-ordered upload: it needs "
          "PERFX_CUDA_ASIDE_COPIES=0");
    if (skip_)
      std::fprintf(stderr, "perfx: PERFX_CUDA_SKIP=%s: those ops are not run (timing only)\n",
                   std::getenv("PERFX_CUDA_SKIP"));
    (void)qkv_trigger_pct();  // PERFX_CUDA_QKV_TRIGGER: a bad value is refused here, not mid-run
    (void)qkv_grid_free();    // PERFX_CUDA_QKV_GRID_FREE: likewise
    attn_merge_ = env_switch("PERFX_CUDA_ATTN_MERGE");
    {  // PERFX_CUDA_NORM_FUSE=1: linear_add_rms_norm_linear as two linked GEMVs (off by default)
      const char* e = std::getenv("PERFX_CUDA_NORM_FUSE");
      const std::string v = e ? e : "";
      check(v.empty() || v == "0" || v == "1",
            "PERFX_CUDA_NORM_FUSE must be 0 or 1, got '" + v + "'");
      norm_fuse_ = v == "1";
    }
    const char* prof = std::getenv("PERFX_CUDA_PROFILE");
    profile_ = prof && std::string(prof) == "1";
    if (profile_) graphs_enabled_ = false;   // per-op events need eager launches
    trace_ = std::make_unique<TraceRing>();  // PERFX_CUDA_TRACE=FILE (trace builds only)
    cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int p = 0; p < 2; ++p)
      for (cudaEvent_t* e : {&staged_[p], &used_[p], &ids_copied_[p]})
        cuda_ok(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
    cuda_ok(cudaEventCreateWithFlags(&fwd_done_, cudaEventDisableTiming), "cudaEventCreate");
    if (aside_) {
      cuda_ok(cudaStreamCreateWithFlags(&up_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      cuda_ok(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    cublas_ok(blas_->create(&cublas_), "cublasCreate");
    cublas_ok(blas_->set_stream(cublas_, stream_), "cublasSetStream");
    cublas_ws_.alloc(32u << 20, "the cuBLAS workspace", dev_);
    cublas_ok(blas_->set_workspace(cublas_, cublas_ws_.get(), cublas_ws_.size()),
              "cublasSetWorkspace");
    guarded("init", [] {
      linear_kernels_init();
      paged_attention_init();
    });
  }

  ~CudaBackend() override {
    (void)cudaSetDevice(dev_);
    if (state_ == State::Capturing) {
      cudaGraph_t g = nullptr;
      (void)cudaStreamEndCapture(stream_, &g);
      if (g) (void)cudaGraphDestroy(g);
    }
    (void)sync_streams();
    if (profile_) print_profile();
    trace_.reset();  // writes the PERFX_CUDA_TRACE file
    clear_graphs();
    for (void* h : pinned_)
      if (h) (void)cudaFreeHost(h);
    for (SampleSlot& sl : slots_) {
      if (sl.host) (void)cudaFreeHost(sl.host);
      if (sl.done) (void)cudaEventDestroy(sl.done);
    }
    if (cublas_) (void)blas_->destroy(cublas_);
    for (int p = 0; p < 2; ++p)
      for (cudaEvent_t e : {staged_[p], used_[p], ids_copied_[p]})
        if (e) (void)cudaEventDestroy(e);
    if (fwd_done_) (void)cudaEventDestroy(fwd_done_);
    for (cudaStream_t st : {up_stream_, copy_stream_, side_stream_})
      if (st) (void)cudaStreamDestroy(st);
    (void)cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(dev_); }
  DType act_dtype() const override { return act_; }
  bool reads_host_weights() const override { return false; }
  bool device_memory(size_t* free_b, size_t* total_b) const override {
    return cudaMemGetInfo(free_b, total_b) == cudaSuccess;
  }

  // ---------------------------------------------------------------------------------------------
  // memory

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    gen_->value++;  // a new scratch generation: graphs captured over the old one must not replay
    return std::make_unique<CudaBuffer>(bytes, dev_, gen_);
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    finish_forward();
    cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync(to_device)");
    cuda_ok(cudaStreamSynchronize(stream_), "to_device");
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    finish_forward();
    cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync(to_host)");
    cuda_ok(cudaStreamSynchronize(stream_), "to_host (a kernel of this step failed)");
  }
  void synchronize() override {
    finish_forward();
    cuda_ok(sync_streams(), "synchronize (a kernel failed)");
  }
  /// Waits for the stream and the side streams (PERFX_CUDA_ASIDE_COPIES); the first error.
  cudaError_t sync_streams() {
    cudaError_t e = cudaStreamSynchronize(stream_);
    for (cudaStream_t st : {up_stream_, copy_stream_, side_stream_})
      if (st) {
        const cudaError_t e2 = cudaStreamSynchronize(st);
        if (e == cudaSuccess) e = e2;
      }
    return e;
  }

  // ---------------------------------------------------------------------------------------------
  // weights

  std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) override {
    return load_linear_ordered(parts, W4RowOrder::kStacked);
  }

  /// W4 gate|up weights are packed interleaved (rows 8b..8b+7 of gate and of up in one 16-row
  /// block), so w4_gemv3's epilogue applies SwiGLU (linear_silu_mul); other kinds are stacked.
  std::unique_ptr<Weight> load_gate_up(const std::vector<LinearSource>& parts) override {
    const bool pair = parts.size() == 2 && parts[0].out == parts[1].out && parts[0].out % 8 == 0;
    return load_linear_ordered(parts, pair ? W4RowOrder::kInterleave8 : W4RowOrder::kStacked);
  }

  std::unique_ptr<Weight> load_linear_ordered(const std::vector<LinearSource>& parts,
                                              W4RowOrder order) {
    check(!parts.empty(), "load_linear: no parts");
    auto w = std::make_unique<CudaWeight>();
    w->freed = weights_freed_;
    if (l2_prefetch_cap_ > 0) w->graphs = gen_;  // graphs may warm it for another linear
    w->in = parts[0].in;
    w->out = 0;
    bool all_int4 = true, all_q4_0 = true, all_q8_0 = true;
    for (const auto& p : parts) {
      check(p.in == w->in, "fused linear parts have different input widths");
      w->out += p.out;
      all_int4 = all_int4 && p.is_int4() && !p.int4->has_mins();
      all_q4_0 = all_q4_0 && !p.is_int4() && p.weight.dtype == DType::Q4_0;
      all_q8_0 = all_q8_0 && !p.is_int4() && p.weight.dtype == DType::Q8_0;
    }
    if (all_int4 || all_q4_0) {
      std::vector<Int4Matrix> decoded;  // GGUF Q4_0: group 32, zero 8
      std::vector<const Int4Matrix*> ptrs;
      if (all_q4_0) {
        for (const auto& p : parts) decoded.push_back(int4_from_gguf(p.weight));
        for (const auto& m : decoded) ptrs.push_back(&m);
      } else {
        for (const auto& p : parts) ptrs.push_back(p.int4.get());
      }
      bool packed = false;
      guarded("W4 upload", [&] {
        try {
          w->w4 = std::make_unique<W4Weight>(W4Weight::from_parts(ptrs, order));
          w->interleaved = order == W4RowOrder::kInterleave8;
          packed = true;
        } catch (const Error&) {
          packed = false;  // a group size the kernels do not take: fp16 dense below
        }
      });
      if (packed) {
        w->kind = CudaWeight::Kind::W4;
        release_sources(parts);
        dense_copy(*w);
        return w;
      }
    } else if (all_q8_0) {
      std::vector<Int8Matrix> decoded;
      std::vector<const Int8Matrix*> ptrs;
      for (const auto& p : parts) decoded.push_back(int8_from_gguf(p.weight));
      for (const auto& m : decoded) ptrs.push_back(&m);
      bool packed = false;
      guarded("W8 upload", [&] {
        try {
          w->w8 = std::make_unique<W8Weight>(W8Weight::from_parts(ptrs));
          packed = true;
        } catch (const Error&) {
          packed = false;
        }
      });
      if (packed) {
        w->kind = CudaWeight::Kind::W8;
        release_sources(parts);
        dense_copy(*w);
        return w;
      }
    }
    // Dense: every part converted to the activation dtype, stacked by rows.
    w->kind = CudaWeight::Kind::Dense;
    w->mem.alloc((size_t)(w->out * w->in) * 2,
                 "a weight [" + std::to_string(w->out) + ", " + std::to_string(w->in) + "]", dev_);
    int64_t row0 = 0;
    for (const auto& p : parts) {
      upload_dense_rows(p, static_cast<uint16_t*>(w->mem.get()) + row0 * w->in);
      row0 += p.out;
    }
    release_sources(parts);
    return w;
  }

  std::unique_ptr<Weight> load_vector(const TensorView& v) override {
    auto w = std::make_unique<CudaWeight>();
    w->kind = CudaWeight::Kind::Vector;
    w->out = v.numel();
    w->in = 1;
    std::vector<float> host((size_t)w->out);
    float_to_f32(v.dtype, v.data, host.data(), w->out, "tensor '" + v.name + "'");
    w->mem.alloc(host.size() * 4, "vector '" + v.name + "'", dev_);
    cuda_ok(cudaMemcpy(w->mem.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice),
            "upload vector");
    return w;
  }

  std::unique_ptr<Weight> load_embedding(const TensorView& table) override {
    check(table.shape.size() == 2, "embedding '" + table.name + "' is not 2-D");
    LinearSource s;
    s.weight = table;
    s.out = table.shape[0];
    s.in = table.shape[1];
    auto w = std::make_unique<CudaWeight>();
    w->freed = weights_freed_;
    if (l2_prefetch_cap_ > 0) w->graphs = gen_;  // graphs may warm it for another linear
    w->kind = CudaWeight::Kind::Dense;
    w->out = s.out;
    w->in = s.in;
    w->mem.alloc((size_t)(s.out * s.in) * 2, "the embedding table", dev_);
    upload_dense_rows(s, static_cast<uint16_t*>(w->mem.get()));
    vocab_ = std::max<int64_t>(vocab_, s.out);
    return w;
  }

  std::unique_ptr<RopeTable> load_rope(const RopeParams& p) override {
    check(p.rot_dim >= 0 && p.rot_dim <= p.head_dim && p.rot_dim % 2 == 0 &&
              (int)p.inv_freq.size() == p.rot_dim / 2,
          "load_rope: inconsistent RoPE parameters");
    auto t = std::make_unique<CudaRope>();
    t->params = p;
    t->inv_freq.alloc(std::max<size_t>(p.inv_freq.size(), 1) * 4, "the RoPE table", dev_);
    if (!p.inv_freq.empty())
      cuda_ok(cudaMemcpy(t->inv_freq.get(), p.inv_freq.data(), p.inv_freq.size() * 4,
                         cudaMemcpyHostToDevice),
              "upload RoPE table");
    gen_->value++;
    return t;
  }

  double kv_bytes_per_token(int n_kv_heads, int head_dim,
                            const KvCacheTypes& types) const override {
    if (types.k.value_or(act_) != DType::Q8_0)
      return Backend::kv_bytes_per_token(n_kv_heads, head_dim, types);
    // CudaKv's q8 layout: an int8 per value and a scale record per (slot, KV head), K and V
    return 2.0 * n_kv_heads * (head_dim + 2.0 * q8_scale_stride(head_dim));
  }

  void check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const override {
    check_kv_shape(n_kv_heads, head_dim);
    check(
        head_dim <= 256 && head_dim % 2 == 0,
        "the CUDA backend needs an even head_dim of at most 256, got " + std::to_string(head_dim));
    const DType kt = types.k.value_or(act_), vt = types.v.value_or(act_);
    for (DType t : {kt, vt})
      check_kv_type(t == act_ || t == DType::Q8_0,
                    std::string("the CUDA backend keeps the KV cache in the activation dtype (") +
                        kv_type_name(act_) + ") or q8_0; " + kv_type_unsupported(t) + " on it");
    check_kv_type(kt == vt, std::string("the CUDA backend takes one type for K and V (") +
                                kKvTypeFlags + "); --cache-type-k " + kv_type_name(kt) +
                                " and --cache-type-v " + kv_type_name(vt) + " differ");
    check_kv_q8_head_dim(kt, head_dim);
  }

  std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size, int n_kv_heads,
                                       int head_dim, const KvCacheTypes& types) override {
    check_kv_counts(n_layers, n_blocks, block_size);
    check_kv(n_kv_heads, head_dim, types);
    const bool q8 = types.k.value_or(act_) == DType::Q8_0;
    auto kv = std::make_unique<CudaKv>();
    kv->n_layers = n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->q8 = q8;
    kv->pool_elems = (size_t)n_blocks * block_size * n_kv_heads * head_dim;
    kv->mem.alloc(kv->pool_bytes() * 2 * (size_t)n_layers,
                  "the KV cache (" + std::to_string((int64_t)n_blocks * block_size) + " tokens)",
                  dev_);
    size_t need = 0;
    if (paged_attention_takes(head_dim, {}))
      guarded("attention workspace", [&] { need = paged_attention_workspace_bytes(head_dim); });
    if (attn_ws_.size() < need) attn_ws_.alloc(need, "the attention workspace", dev_);
    if (need > 0 && attn_counters_.get() == nullptr) {  // zeroed once; every call leaves them so
      attn_counters_.alloc(paged_attention_counters_bytes(), "the attention split counters", dev_);
      cuda_ok(cudaMemsetAsync(attn_counters_.get(), 0, attn_counters_.size(), stream_),
              "cudaMemsetAsync");
    }
    return kv;
  }

  // ---------------------------------------------------------------------------------------------
  // the step's layout

  void prepare_batch(const BatchLayout& b) override {
    finish_forward();
    if (aside_) {  // the step just queued has read layout buffer par_ and written ids_[par_ ^ 1]
      cuda_ok(cudaEventRecord(used_[par_], stream_), "cudaEventRecord");
      par_ ^= 1;
    }
    last_linear_ = nullptr;    // a new forward: no linear before it (and its weight may be gone)
    after_attention_ = false;  // (an attention op that threw must not reach the next forward)
    const int T = b.n_tokens, S = b.n_seqs;
    PERFX_CHECK(T > 0 && S > 0 && (int)b.token_ids.size() == T && (int)b.positions.size() == T &&
                    (int)b.slots.size() == T && (int)b.token_seq.size() == T &&
                    (int)b.block_tables.size() == S * b.max_blocks,
                "prepare_batch: inconsistent batch layout");
    check_fed_rows(b, fed_d_ ? fed_n_ : 0);
    const bool fed = b.fed();
    // Row t feeds token t for every token (a whole decode batch carried on): the ids are used
    // where the draw left them; any other mapping gathers them (launch_feed_ids).
    bool fed_identity = fed && fed_n_ == T;
    for (int t = 0; fed_identity && t < T; ++t) fed_identity = b.fed_rows[(size_t)t] == t;
    PERFX_CHECK(!fed || fed_identity || fed_n_ <= kFeedIdsMaxRows,
                "prepare_batch: a fed step from a sample of " + std::to_string(fed_n_) +
                    " rows (at most " + std::to_string(kFeedIdsMaxRows) + ")");
    for (int t = 0; t < T; ++t) {
      PERFX_CHECK((fed && b.fed_rows[(size_t)t] >= 0) ||
                      (b.token_ids[t] >= 0 && (vocab_ == 0 || b.token_ids[t] < vocab_)),
                  "token id " + std::to_string(b.token_ids[t]) + " is outside the vocabulary of " +
                      std::to_string(vocab_));
      PERFX_CHECK(b.positions[t] >= 0, "prepare_batch: negative position");
    }
    // Per-sequence rows and key counts; tokens of a sequence must be contiguous and consecutive.
    q_start_.assign((size_t)S + 1, 0);
    kv_len_.assign((size_t)S, 0);
    int max_q = 0, max_kv = 0;
    {
      int t = 0;
      for (int s = 0; s < S; ++s) {
        q_start_[(size_t)s] = t;
        while (t < T && b.token_seq[t] == s) {
          PERFX_CHECK(t == q_start_[(size_t)s] || b.positions[t] == b.positions[t - 1] + 1,
                      "prepare_batch: the tokens of a sequence must have consecutive positions");
          ++t;
        }
        const int q = t - q_start_[(size_t)s];
        if (q > 0) kv_len_[(size_t)s] = b.positions[t - 1] + 1;
        max_q = std::max(max_q, q);
        max_kv = std::max(max_kv, kv_len_[(size_t)s]);
      }
      q_start_[(size_t)S] = t;
      PERFX_CHECK(
          t == T,
          "prepare_batch: the tokens of each sequence must be contiguous and in sequence order");
    }
    decode_only_ = max_q == 1 && T == S;
    bool eligible = graphs_enabled_ && decode_only_ && (int)b.logit_rows.size() == T;
    for (int i = 0; eligible && i < T; ++i) eligible = b.logit_rows[(size_t)i] == i;
    width_ = eligible ? next_pow2(std::max(b.max_blocks, 1)) : std::max(b.max_blocks, 1);
    // Staging: ids, positions, slots, token_seq [T], logit rows [L]; q_start [S + 1]; kv_len [S];
    // tables [S, width]; fed rows [T] when gathered.
    const size_t L = b.logit_rows.size();
    const size_t n_gather = fed && !fed_identity ? (size_t)T : 0;
    const size_t n_int = (size_t)T * 4 + L + (size_t)S * 2 + 1 + (size_t)S * width_ + n_gather;
    ensure_staging(n_int);
    if (eligible || fed) ensure_step_ids(T);
    const int p = par_;
    cuda_ok(cudaEventSynchronize(staged_[p]), "staging");  // its previous upload has read it
    int32_t* h = static_cast<int32_t*>(pinned_[p]);
    size_t at = 0;
    auto put = [&](const int32_t* src, size_t n) {
      const size_t off = at;
      if (n) std::memcpy(h + at, src, n * 4);
      at += n;
      return off;
    };
    const size_t o_ids = put(b.token_ids.data(), (size_t)T),
                 o_pos = put(b.positions.data(), (size_t)T),
                 o_slots = put(b.slots.data(), (size_t)T),
                 o_seq = put(b.token_seq.data(), (size_t)T), o_rows = put(b.logit_rows.data(), L),
                 o_qs = put(q_start_.data(), (size_t)S + 1), o_kv = put(kv_len_.data(), (size_t)S);
    const size_t o_bt = at;
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < width_; ++j)
        h[at++] = j < b.max_blocks ? b.block_tables[(size_t)s * b.max_blocks + j] : -1;
    const size_t o_fed = put(b.fed_rows.data(), n_gather);
    int32_t* d = static_cast<int32_t*>(batch_dev_[p].get());
    cudaStream_t up = stream_;
    if (aside_) {
      // The upload on its own stream, after the step that last read this buffer (two steps
      // back); the stream waits for it (below), which, queued while the previous step runs, is
      // done by the time that step ends.
      up = up_stream_;
      cuda_ok(cudaStreamWaitEvent(up, used_[p], 0), "cudaStreamWaitEvent");
    } else if ((skip_ & kSkipUpload) && eligible && n_gather == 0 &&
               graphs_.contains(GraphKey{T, width_, gen_->value.load(), fed, p})) {
      // PERFX_CUDA_SKIP=upload (timing only): a replayed step's upload on a second stream that
      // the graph does not wait for (not where the feed gather, before the graph, reads it).
      if (!side_stream_)
        cuda_ok(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking),
                "cudaStreamCreate");
      up = side_stream_;
    }
    cuda_ok(cudaMemcpyAsync(d, h, at * 4, cudaMemcpyHostToDevice, up), "upload batch");
    cuda_ok(cudaEventRecord(staged_[p], up), "cudaEventRecord");
    if (aside_) {
      cuda_ok(cudaStreamWaitEvent(stream_, staged_[p], 0), "cudaStreamWaitEvent");
      // This step's argmax writes ids_[p ^ 1]: the host's copy of what the step before last
      // wrote there must have read it.
      cuda_ok(cudaStreamWaitEvent(stream_, ids_copied_[p ^ 1], 0), "cudaStreamWaitEvent");
    }
    // A fed step reads its ids from ids_[p], where an argmax inside the last graph wrote them;
    // a draw made elsewhere (a sampling slot) is copied there first, device to device; a subset
    // of the draw's rows, or host ids among them, is gathered there (after the host's copy of
    // the last argmax's ids has read them).
    int32_t* step_ids = static_cast<int32_t*>(ids_[p].get());
    ids_out_ = static_cast<int32_t*>(ids_[aside_ ? p ^ 1 : p].get());
    if (aside_ && fed && (!fed_identity || fed_d_ != step_ids))
      cuda_ok(cudaStreamWaitEvent(stream_, ids_copied_[p], 0), "cudaStreamWaitEvent");
    if (fed_identity && fed_d_ != step_ids)
      cuda_ok(cudaMemcpyAsync(step_ids, fed_d_, (size_t)T * 4, cudaMemcpyDeviceToDevice, stream_),
              "feed sampled ids");
    if (fed && !fed_identity) {
      launch_feed_ids(d + o_ids, d + o_fed, fed_d_, fed_n_, step_ids, T, stream_);
      launched("feed sampled ids");
    }
    ids_d_ = fed ? step_ids : d + o_ids;
    pos_d_ = d + o_pos;
    slots_d_ = d + o_slots;
    seq_d_ = d + o_seq;
    rows_d_ = d + o_rows;
    q_start_d_ = d + o_qs;
    kv_len_d_ = d + o_kv;
    tables_d_ = d + o_bt;
    n_tokens_ = T;
    n_seqs_ = S;
    max_q_ = max_q;
    max_kv_ = max_kv;
    graph_step_ = eligible;
    if (eligible) begin_graph_step(T, fed);
  }

  // ---------------------------------------------------------------------------------------------
  // ops

  void embedding(const Weight& table, const BatchLayout& b, Tensor out) override {
    last_linear_ = nullptr;  // not between a linear and attention
    if (replaying()) return;
    OpTimer timer(*this, profile_ ? "embedding" : "");
    const auto& w = cw(table);
    PERFX_CHECK(out.dtype == act_ && out.cols == w.in && out.rows >= b.n_tokens,
                "embedding: shape or dtype mismatch");
    launch_embedding(w.mem.get(), ids_d_, b.n_tokens, w.in, out.data, out.stride, act_, stream_);
    launched("embedding");
  }

  void rms_norm(Tensor x, const Weight& w, float eps, Tensor out) override {
    last_linear_ = nullptr;  // not between a linear and attention
    if (replaying() || (skip_ & kSkipNorm)) return;
    OpTimer timer(*this, profile_ ? "rms_norm" : "");
    PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && x.rows == out.rows && x.cols == out.cols &&
                    w.out == x.cols,
                "rms_norm: shape or dtype mismatch");
    launch_rms_norm(x.data, x.stride, cw(w).vec(), eps, (int)x.rows, x.cols, out.data, out.stride,
                    act_, stream_);
    launched("rms_norm");
  }

  void add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps, Tensor out) override {
    last_linear_ = nullptr;  // not between a linear and attention
    if (replaying() || (skip_ & kSkipNorm)) return;
    OpTimer timer(*this, profile_ ? "add_rms_norm" : "");
    PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && residual.dtype == act_ &&
                    x.rows == out.rows && residual.rows == x.rows && x.cols == out.cols &&
                    residual.cols == x.cols && w.out == x.cols,
                "add_rms_norm: shape or dtype mismatch");
    launch_add_rms_norm(residual.data, residual.stride, x.data, x.stride, cw(w).vec(), eps,
                        (int)x.rows, x.cols, out.data, out.stride, act_, stream_);
    launched("add_rms_norm");
  }

  void linear(Tensor x, const Weight& wt, const Weight* bias, Tensor y) override {
    if (replaying() || (skip_ & kSkipLinear)) return;
    OpTimer timer(*this, profile_ ? linear_name(wt, x.rows) : std::string());
    const auto& w = cw(wt);
    PERFX_CHECK(x.cols == w.in && y.cols == w.out && x.rows == y.rows && x.dtype == act_ &&
                    (y.dtype == act_ || y.dtype == DType::F32),
                "linear: shape or dtype mismatch");
    PERFX_CHECK(!bias || bias->out == w.out, "linear: bias length mismatch");
    PERFX_CHECK(!w.interleaved,
                "linear: this gate|up weight is stored interleaved by load_gate_up; use "
                "linear_silu_mul");
    const int M = (int)x.rows;
    if (M == 0) return;
    const float* b = bias ? cw(*bias).vec() : nullptr;
    const L2Prefetch pf = l2_prefetch_after(w, M);
    last_linear_ = &w;
    switch (w.kind) {
      case CudaWeight::Kind::Dense:
        gemm(w.mem.get(), w.out, w.in, x, y, b);
        break;
      case CudaWeight::Kind::W4:
        guarded("linear (W4A16)",
                [&] { quant_linear(w, x, y, b, pf, w.feeds_attention ? qkv_trigger_pct() : 0); });
        break;
      case CudaWeight::Kind::W8:
        guarded("linear (W8A16)", [&] { quant_linear(w, x, y, b, pf); });
        break;
      case CudaWeight::Kind::Vector:
        throw Error("linear: a vector is not a matrix");
    }
    launched("linear");
  }

  void rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                     const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kvs,
                     int layer, const BatchLayout& b) override {
    if (replaying() || (skip_ & kSkipRope)) return;
    OpTimer timer(*this, profile_ ? "rope_kv_store" : "");
    auto& kv = static_cast<CudaKv&>(kvs);
    const RopeParams& rp = rope.params;
    PERFX_CHECK(q.dtype == act_ && k.dtype == act_ && v.dtype == act_ &&
                    rp.head_dim == kv.head_dim && q.cols == (int64_t)n_q_heads * kv.head_dim &&
                    k.cols == (int64_t)kv.n_kv_heads * kv.head_dim && v.cols == k.cols &&
                    layer >= 0 && layer < kv.n_layers,
                "rope_kv_store: shape or dtype mismatch");
    const int64_t n_slots = (int64_t)kv.n_blocks * kv.block_size;
    if (!replaying())
      for (int t = 0; t < b.n_tokens; ++t)
        PERFX_CHECK(b.slots[t] >= 0 && b.slots[t] < n_slots,
                    "KV slot " + std::to_string(b.slots[t]) + " out of range");
    RopeKvArgs a;
    a.dtype = act_ == DType::BF16 ? AttnDtype::kBF16 : AttnDtype::kF16;
    a.q = q.data;
    a.ldq = q.stride;
    a.k = k.data;
    a.ldk = k.stride;
    a.v = v.data;
    a.ldv = v.stride;
    a.k_cache = kv.k(layer);
    a.v_cache = kv.v(layer);
    a.kv_q8 = kv.q8;
    a.k_scale = kv.k_scale(layer);
    a.v_scale = kv.v_scale(layer);
    a.n_slots = n_slots;
    a.positions = pos_d_;
    a.slots = slots_d_;
    a.n_tokens = b.n_tokens;
    a.n_q_heads = n_q_heads;
    a.n_kv_heads = kv.n_kv_heads;
    a.head_dim = kv.head_dim;
    a.rot_dim = rp.rot_dim;
    a.interleaved = rp.interleaved;
    a.inv_freq = static_cast<const float*>(static_cast<const CudaRope&>(rope).inv_freq.get());
    a.attention_factor = rp.attention_factor;
    a.q_norm = q_norm ? cw(*q_norm).vec() : nullptr;
    a.k_norm = k_norm ? cw(*k_norm).vec() : nullptr;
    a.norm_eps = eps;
    guarded("rope_kv_store", [&] { rope_norm_kv_store(a, stream_); });
    launched("rope_kv_store");
  }

  void attention(Tensor q, const KvStorage& kvs, int layer, int n_q_heads, float scale,
                 const BatchLayout& b, Tensor out) override {
    if (replaying() || (skip_ & kSkipAttn)) return;
    OpTimer timer(*this, profile_ ? "attention" : "");
    mark_feeds_attention();
    const auto& kv = static_cast<const CudaKv&>(kvs);
    PERFX_CHECK(q.dtype == act_ && out.dtype == act_ && q.rows == b.n_tokens &&
                    out.rows == q.rows && q.cols == (int64_t)n_q_heads * kv.head_dim &&
                    out.cols == q.cols && layer >= 0 && layer < kv.n_layers &&
                    n_q_heads % kv.n_kv_heads == 0,
                "attention: shape or dtype mismatch");
    const int hd = kv.head_dim;
    if (!paged_attention_takes(hd, {q, out})) {  // the plain kernel
      launch_attention_generic(q.data, q.stride, kv.k(layer), kv.v(layer), kv.k_scale(layer),
                               kv.v_scale(layer), n_q_heads, kv.n_kv_heads, hd, kv.block_size,
                               tables_d_, width_, seq_d_, pos_d_, n_tokens_, scale, out.data,
                               out.stride, act_, stream_);
      launched("attention (generic)");
      return;
    }
    const PagedAttentionArgs a = paged_args(q, kv, layer, n_q_heads, scale, out);
    guarded("attention", [&] { paged_attention(a, stream_); });
    launched("attention");
  }

  /// The split-KV kernel with RoPE + KV store in its prologue (PagedAttentionArgs::rope) where
  /// every sequence is on it (q_len * group <= 16: decode) and the shapes take the tensor-core
  /// kernels; otherwise the two ops. PERFX_CUDA_ROPE_FUSED=0 always runs the two ops.
  void rope_kv_attention(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                         const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kvs,
                         int layer, float scale, const BatchLayout& b, Tensor out) override {
    auto& kv = static_cast<CudaKv&>(kvs);
    const int hd = kv.head_dim;
    const bool fits = rope_fused_ && !(skip_ & (kSkipRope | kSkipAttn)) && n_q_heads > 0 &&
                      n_q_heads % kv.n_kv_heads == 0 &&
                      (int64_t)max_q_ * (n_q_heads / kv.n_kv_heads) <= 16 &&
                      paged_attention_takes(hd, {q, k, v, out});
    if (!fits)
      return Backend::rope_kv_attention(q, k, v, n_q_heads, q_norm, k_norm, eps, rope, kvs, layer,
                                        scale, b, out);
    if (replaying()) return;
    OpTimer timer(*this, profile_ ? "rope_kv_attention" : "");
    mark_feeds_attention();
    const RopeParams& rp = rope.params;
    PERFX_CHECK(q.dtype == act_ && k.dtype == act_ && v.dtype == act_ && out.dtype == act_ &&
                    rp.head_dim == hd && q.rows == b.n_tokens && k.rows == q.rows &&
                    v.rows == q.rows && out.rows == q.rows && q.cols == (int64_t)n_q_heads * hd &&
                    out.cols == q.cols && k.cols == (int64_t)kv.n_kv_heads * hd &&
                    v.cols == k.cols && layer >= 0 && layer < kv.n_layers,
                "rope_kv_attention: shape or dtype mismatch");
    // The kernel writes each new token where its block table points; rope_kv_store would write
    // it to b.slots. They must agree (the engine's layouts always do).
    for (int t = 0; t < b.n_tokens; ++t) {
      const int s = b.token_seq[t], p = b.positions[t], bs = kv.block_size;
      const int blk =
          p / bs < b.max_blocks ? b.block_tables[(size_t)s * b.max_blocks + p / bs] : -1;
      PERFX_CHECK(blk >= 0 && blk < kv.n_blocks && b.slots[t] == (int64_t)blk * bs + p % bs,
                  "rope_kv_attention: token " + std::to_string(t) + "'s KV slot " +
                      std::to_string(b.slots[t]) + " is not where its block table points");
    }
    PagedAttentionArgs a = paged_args(q, kv, layer, n_q_heads, scale, out);
    AttnRopeArgs r;
    r.k = k.data;
    r.ldk = k.stride;
    r.v = v.data;
    r.ldv = v.stride;
    r.rot_dim = rp.rot_dim;
    r.interleaved = rp.interleaved;
    r.inv_freq = static_cast<const float*>(static_cast<const CudaRope&>(rope).inv_freq.get());
    r.attention_factor = rp.attention_factor;
    r.q_norm = q_norm ? cw(*q_norm).vec() : nullptr;
    r.k_norm = k_norm ? cw(*k_norm).vec() : nullptr;
    r.norm_eps = eps;
    a.rope = &r;
    guarded("rope_kv_attention", [&] { paged_attention(a, stream_); });
    launched("rope_kv_attention");
  }

  /// paged_attention's arguments for this step's layout (the tensor-core kernels' path).
  PagedAttentionArgs paged_args(Tensor q, const CudaKv& kv, int layer, int n_q_heads, float scale,
                                Tensor out) const {
    PagedAttentionArgs a;
    a.early_kv = true;  // the batch layout is uploaded before the step; older rows by earlier steps
    a.dtype = act_ == DType::BF16 ? AttnDtype::kBF16 : AttnDtype::kF16;
    a.q = q.data;
    a.ldq = q.stride;
    a.out = out.data;
    a.ldo = out.stride;
    a.k_cache = kv.k(layer);
    a.v_cache = kv.v(layer);
    a.kv_q8 = kv.q8;
    a.k_scale = kv.k_scale(layer);
    a.v_scale = kv.v_scale(layer);
    a.n_q_heads = n_q_heads;
    a.n_kv_heads = kv.n_kv_heads;
    a.head_dim = kv.head_dim;
    a.block_size = kv.block_size;
    a.kv_slots = (int64_t)kv.n_blocks * kv.block_size;
    a.block_tables = tables_d_;
    a.max_blocks = width_;
    a.seq_q_start = q_start_d_;
    a.seq_kv_len = kv_len_d_;
    a.n_seqs = n_seqs_;
    a.n_tokens = n_tokens_;
    a.max_q_len = max_q_;
    // Graph steps: a bound that depends only on the bucketed table width (the kernels read the
    // real lengths on the device), so the captured launch fits every step of that bucket.
    a.max_kv_len = graph_step_ ? width_ * kv.block_size : max_kv_;
    a.scale = scale;
    a.workspace = attn_ws_.get();
    a.workspace_bytes = attn_ws_.size();
    a.maybe_short_seqs = !decode_only_;
    if (attn_merge_) a.split_counters = static_cast<int*>(attn_counters_.get());
    return a;
  }

  void silu_mul(Tensor gate_up, Tensor out) override {
    if (replaying()) return;
    OpTimer timer(*this, profile_ ? "silu_mul" : "");
    PERFX_CHECK(gate_up.dtype == act_ && out.dtype == act_ && gate_up.rows == out.rows &&
                    gate_up.cols == 2 * out.cols,
                "silu_mul: shape or dtype mismatch");
    launch_silu_mul(gate_up.data, gate_up.stride, (int)out.rows, out.cols, out.data, out.stride,
                    act_, stream_);
    launched("silu_mul");
  }

  void linear_silu_mul(Tensor x, const Weight& wt, const Weight* bias, Tensor gu,
                       Tensor act) override {
    if (skip_ & kSkipLinear) return;
    const auto& w = cw(wt);
    if (!w.interleaved) return Backend::linear_silu_mul(x, wt, bias, gu, act);
    if (replaying()) return;
    OpTimer timer(*this, profile_ ? "linear_silu_mul" : "");
    PERFX_CHECK(x.cols == w.in && act.cols * 2 == w.out && gu.cols == w.out && act.rows == x.rows &&
                    gu.rows == x.rows && x.dtype == act_ && act.dtype == act_ && gu.dtype == act_,
                "linear_silu_mul: shape or dtype mismatch");
    PERFX_CHECK(!bias || bias->out == w.out, "linear_silu_mul: bias length mismatch");
    const int M = (int)x.rows;
    if (M == 0) return;
    const float* b = bias ? cw(*bias).vec() : nullptr;
    const L2Prefetch pf = l2_prefetch_after(w, M);
    guarded("linear_silu_mul (W4A16)", [&] {
      if (kernel_ready_x(x) &&
          linear_w4a16_swiglu(w.w4->view(), x.data, x.dtype, M, x.stride, act.data, act.stride, b,
                              stream_, pf,
                              // W4A8's activations only (M <= 8): the epilogue is w4_gemv3's
                              workspace(M <= 8 ? linear_workspace_bytes(*w.w4, M, true) : 0)))
        return;
      // Another kernel: gate|up in the interleaved column order, then the interleaved SwiGLU.
      quant_linear(w, x, gu, nullptr, pf);
      launch_silu_mul(gu.data, gu.stride, M, act.cols, act.data, act.stride, act_, stream_,
                      /*interleaved=*/true, b);
    });
    launched("linear_silu_mul");
  }

  /// The down projection, residual add and next input norm + QKV projection. With
  /// PERFX_CUDA_NORM_FUSE=1, at decode sizes where both weights run w4_gemv (v1), two linked
  /// GEMVs (linear_w4a16_norm_pair: the add in the first's epilogue, the norm in the second's
  /// prologue; y1 and h are not written); otherwise the three ops.
  void linear_add_rms_norm_linear(Tensor x, const Weight& w1t, const Weight* b1, Tensor y1,
                                  Tensor residual, const Weight& norm_w, float eps, Tensor h,
                                  const Weight& w2t, const Weight* b2, Tensor y2) override {
    if (replaying()) return;  // every op of the default returns at once too
    const auto& w1 = cw(w1t);
    const auto& w2 = cw(w2t);
    const int M = (int)x.rows;
    auto ready = [&](const Tensor& t) { return t.dtype == act_ && kernel_ready_x(t); };
    const bool fuse =
        norm_fuse_ && skip_ == 0 && w1.w4 && w2.w4 && !w1.interleaved && !w2.interleaved &&
        residual.rows == M && y2.rows == M && y1.rows == M && h.rows == M && x.cols == w1.in &&
        residual.cols == w1.out && y1.cols == w1.out && h.cols == w1.out && w2.in == w1.out &&
        norm_w.out == w1.out && y2.cols == w2.out && (!b1 || b1->out == w1.out) &&
        (!b2 || b2->out == w2.out) && ready(x) && ready(residual) && ready(y2) &&
        // the unfused path's norm would take its vectorized kernel (the order this one keeps)
        ready(y1) && ready(h) && aligned16(cw(norm_w).vec()) &&
        w4a16_norm_pair_applies(w1.w4->view(), w2.w4->view(), M);
    if (!fuse)
      return Backend::linear_add_rms_norm_linear(x, w1t, b1, y1, residual, norm_w, eps, h, w2t, b2,
                                                 y2);
    OpTimer timer(*this, profile_ ? "linear_add_rms_norm_linear" : "");
    const L2Prefetch pf1 = l2_prefetch_after(w1, M), pf2 = l2_prefetch_after(w2, M);
    last_linear_ = &w2;
    guarded("linear_add_rms_norm_linear (W4A16)", [&] {
      linear_w4a16_norm_pair(w1.w4->view(), x.data, x.stride, b1 ? cw(*b1).vec() : nullptr,
                             residual.data, residual.stride, cw(norm_w).vec(), eps, w2.w4->view(),
                             y2.data, y2.stride, b2 ? cw(*b2).vec() : nullptr, act_, M, stream_,
                             pf1, pf2);
    });
    launched("linear_add_rms_norm_linear");
  }

  /// Attention follows the latest linear directly (only RoPE + KV store may sit between): that
  /// weight feeds attention from now on (CudaWeight::feeds_attention).
  void mark_feeds_attention() {
    after_attention_ = true;
    if (last_linear_ != nullptr && !last_linear_->feeds_attention) {
      last_linear_->feeds_attention = true;
      // graphs captured before knew no better (only w4_gemv3 takes the trigger)
      if (qkv_trigger_pct() > 0 && last_linear_->w4) gen_->value++;
    }
    last_linear_ = nullptr;
  }

  /// What the GEMV of `w` reads into L2 before its PDL wait (w4_gemv3 and w4_gemv), for the linear
  /// right after attention only (its wait spans attention, which leaves DRAM idle): the first
  /// l2_prefetch_cap_ bytes of the linear that followed `w` last time (l2_prefetch_plan.h) — by
  /// default only where that weight is at most twice the cap (§26: TinyLlama's gate|up gained,
  /// 7B's lost at every size), and only for one token (M = 1: TinyLlama at batch 8 measured
  /// −1.1 and −1.4 %, as 7B's 32 attention CTAs lost). Empty when off, the first time round, and
  /// after any weight was freed (the plan starts again); a successor learned anew makes captured
  /// graphs stale. Call once per linear, in launch order, with its token count M.
  L2Prefetch l2_prefetch_after(const CudaWeight& w, int M) {
    const bool after_attention = after_attention_;
    after_attention_ = false;
    if (l2_prefetch_cap_ == 0) return {};
    const uint64_t g = weights_freed_->value.load();
    if (g != l2_plan_freed_) {
      l2_plan_.clear();
      l2_plan_freed_ = g;
    }
    L2Prefetch mine;
    if (l2_warm_offers(w.bytes(), l2_prefetch_cap_, l2_prefetch_auto_)) {
      if (w.w4) {
        const W4View v = w.w4->view();
        mine = l2_prefix(v.q, v.d.q_bytes(), v.sz, v.d.sz_bytes(), l2_prefetch_cap_);
      } else if (w.w8) {
        const W8View v = w.w8->view();
        mine = l2_prefix(v.q, v.d.q_bytes(), v.s, v.d.s_bytes(), l2_prefetch_cap_);
      } else {
        mine = l2_prefix(w.mem.get(), w.mem.size(), nullptr, 0, l2_prefetch_cap_);
      }
    }
    bool changed = false;
    const L2Prefetch next = l2_plan_.next_after(&w, mine, &changed);
    // The previous linear warms its successor only if it came right after attention; only then
    // do graphs captured with its old successor go stale (the successors of the others change
    // whenever a step runs no lm_head, e.g. a chunk of a long prompt, and must not drop graphs).
    if (changed && prev_after_attention_) gen_->value++;
    prev_after_attention_ = after_attention;
    return l2_warm_applies(after_attention, M) ? next : L2Prefetch{};
  }

  /// y = x · Wᵀ (+ bias) for a W4 or W8 weight (checked by the caller): the weight's dequantized
  /// copy on cuBLAS where it has one and M reaches the ladder's dense rung (or x is not
  /// kernel-ready), else the linear_w4a16 / linear_w8a16 ladder, or dequantize + cuBLAS when x is
  /// not 16-byte aligned with a stride that is a multiple of 8.
  /// trigger_pct: w4_gemv3's early trigger for this call (0: the configured default).
  void quant_linear(const CudaWeight& w, const Tensor& x, const Tensor& y, const float* b,
                    const L2Prefetch& pf = {}, int trigger_pct = 0) {
    const int M = (int)x.rows;
    const bool ready = kernel_ready_x(x);
    // the copy serves exactly the ladder's Dense rung (and activations the kernels do not take);
    // the plan is only asked for weights that have a copy
    auto dense_rung = [&] {
      return (w.w4 ? w4a16_plan(w.w4->view(), M, true).kernel
                   : w8a16_plan(w.w8->view(), M, true).kernel) == LinearKernel::Dense;
    };
    if (w.dense.get() != nullptr && (!ready || dense_rung())) {
      gemm(w.dense.get(), w.out, w.in, x, y, b);
      return;
    }
    if (ready) {
      if (w.w4)
        linear_w4a16(*w.w4, x.data, x.dtype, M, x.stride, y.data, y.dtype, y.stride, b,
                     workspace(linear_workspace_bytes(*w.w4, M, true)), stream_, &dense_gemm_, pf,
                     trigger_pct);
      else
        linear_w8a16(*w.w8, x.data, x.dtype, M, x.stride, y.data, y.dtype, y.stride, b,
                     workspace(linear_workspace_bytes(*w.w8, M, true)), stream_, &dense_gemm_);
    } else {
      void* tmp = dequant_scratch(w.out, w.in);
      if (w.w4)
        w4_dequantize(w.w4->view(), tmp, act_, w.in, stream_);
      else
        w8_dequantize(w.w8->view(), tmp, act_, w.in, stream_);
      gemm(tmp, w.out, w.in, x, y, b);
    }
  }

  void gather_rows(Tensor x, const BatchLayout& b, Tensor out) override {
    if (replaying()) return;
    OpTimer timer(*this, profile_ ? "gather_rows" : "");
    PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && x.cols == out.cols &&
                    out.rows >= (int64_t)b.logit_rows.size(),
                "gather_rows: shape or dtype mismatch");
    launch_gather_rows(x.data, x.stride, rows_d_, (int)b.logit_rows.size(), x.cols, out.data,
                       out.stride, act_, stream_);
    launched("gather_rows");
  }

  void sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) override {
    OpTimer timer(*this, profile_ ? "sample" : "");
    check_sample_rows(logits, rows);
    if (graph_argmax(logits, rows)) {
      finish_forward();
      SampleJob job = copy_step_ids((int)rows.size());
      cuda_ok(cudaEventSynchronize(slots_[job.slot].done), "sample");
      std::vector<RowState> state(rows.size(), RowState::Host);
      sample_collect(job, ids, state);
      return;
    }
    finish_forward();
    std::vector<RowState> state(rows.size(), RowState::Host);
    SampleJob job;
    if (sample_enqueue(logits, rows, job)) {
      cuda_ok(cudaEventSynchronize(slots_[job.slot].done), "sample");
      sample_collect(job, ids, state);
    }
    // The other rows travel to the host and the reference sampler picks (same draws as the CPU
    // backend); a row the GPU handed back already carries its penalties.
    std::vector<float> row((size_t)logits.cols);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (state[i] == RowState::Picked) continue;
      const SampleRow* r = &rows[i];
      SampleRow plain;
      if (state[i] == RowState::Penalized) {
        plain = rows[i];
        plain.repeat_penalty = 1.0f;
        plain.presence_penalty = plain.frequency_penalty = 0.0f;
        r = &plain;
      }
      to_host(row.data(), logits.rows_view(r->row, 1).data, row.size() * 4);
      ids[i] = cpu::sample_logits(row.data(), (int)logits.cols, *r, sample_scratch_);
    }
  }

  static void check_sample_rows(const Tensor& logits, const std::vector<SampleRow>& rows) {
    PERFX_CHECK(logits.dtype == DType::F32, "sample: logits must be F32");
    for (const auto& r : rows)
      PERFX_CHECK(r.row >= 0 && r.row < logits.rows, "sample: row out of range");
  }

  // Overlapped decode: the draw is queued behind the step; its ids stay on the device for the
  // next fed step, BatchLayout::fed_rows (in ids_out_ when the graph's argmax drew them, else in
  // the slot's device buffer; prepare_batch copies or gathers them into ids_[par_]), and travel to
  // the slot's pinned buffer, which sample_end reads after the slot's event.
  bool samples_ahead() const override { return true; }
  uint64_t graphs_captured() const override { return graphs_captured_; }
  bool queues_work() const override { return true; }
  void sample_begin(Tensor logits, const std::vector<SampleRow>& rows) override {
    PERFX_CHECK(pending_.size() < 2, "sample_begin: two samples are already outstanding");
    for (const auto& r : rows)
      PERFX_CHECK(samples_ahead_row(r),
                  "sample_begin: a row with top-k / top-p / min-p or penalties (use sample)");
    check_sample_rows(logits, rows);
    if (graph_argmax(logits, rows)) {
      finish_forward();
      SampleJob job = copy_step_ids((int)rows.size());
      fed_d_ = job.out_d;
      fed_n_ = (int)rows.size();
      pending_.push_back(std::move(job));
      return;
    }
    finish_forward();
    bool greedy = false, drawn = false;
    for (const auto& r : rows) (r.temperature <= 0 ? greedy : drawn) = true;
    SampleJob job;
    if ((greedy && drawn) || !sample_enqueue(logits, rows, job)) {
      // The kernels write greedy ids before drawn ones, so a mix of the two is not in row order
      // (and PERFX_CUDA_GPU_SAMPLING=0 draws on the host): pick now, upload the ids to feed.
      job = SampleJob{};
      job.ids.resize(rows.size());
      sample(logits, rows, job.ids.data());
      job.ready = true;
      SampleSlot& sl = slot_for(rows.size() * 4, job.slot);
      std::memcpy(sl.host, job.ids.data(), rows.size() * 4);
      cuda_ok(
          cudaMemcpyAsync(sl.dev.get(), sl.host, rows.size() * 4, cudaMemcpyHostToDevice, stream_),
          "sampled ids");
      cuda_ok(cudaEventRecord(sl.done, stream_), "cudaEventRecord");
      job.out_d = static_cast<const int32_t*>(sl.dev.get());
    }
    fed_d_ = job.out_d;
    fed_n_ = (int)rows.size();
    job.n_rows = rows.size();
    pending_.push_back(std::move(job));
  }
  void sample_end(int32_t* ids) override {
    PERFX_CHECK(!pending_.empty(), "sample_end: no sample_begin is outstanding");
    SampleJob job = std::move(pending_.front());
    pending_.pop_front();
    if (job.ready) {
      std::copy(job.ids.begin(), job.ids.end(), ids);
      return;
    }
    cuda_ok(cudaEventSynchronize(slots_[job.slot].done), "sample (a kernel of the step failed)");
    std::vector<RowState> state(job.n_rows, RowState::Host);
    sample_collect(job, ids, state);
    for (RowState st : state)
      PERFX_CHECK(st == RowState::Picked, "sample_end: a row was not picked on the GPU");
  }

 private:
  enum class State { Eager, Capturing, Replaying };

  // ---- per-op GPU time (PERFX_CUDA_PROFILE=1): events around every op, summed per op name and
  // printed when the backend ends.
  struct OpTimer {
    CudaBackend& be;
    size_t at = SIZE_MAX;
    OpTimer(CudaBackend& b, std::string name) : be(b) {
      if (!be.profile_) return;
      at = be.prof_next(std::move(name));
    }
    ~OpTimer() {
      if (at != SIZE_MAX) (void)cudaEventRecord(be.prof_[at].stop, be.stream_);
    }
  };
  struct ProfRecord {
    std::string name;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  size_t prof_next(std::string name) {
    if (prof_used_ == prof_.size()) {
      if (prof_.size() >= 8192) prof_flush();
      if (prof_used_ == prof_.size()) {
        ProfRecord r;
        (void)cudaEventCreate(&r.start);
        (void)cudaEventCreate(&r.stop);
        prof_.push_back(r);
      }
    }
    ProfRecord& r = prof_[prof_used_];
    r.name = std::move(name);
    (void)cudaEventRecord(r.start, stream_);
    return prof_used_++;
  }
  void prof_flush() {
    (void)cudaStreamSynchronize(stream_);
    for (size_t i = 0; i < prof_used_; ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, prof_[i].start, prof_[i].stop) == cudaSuccess) {
        auto& a = prof_sum_[prof_[i].name];
        a.first += 1;
        a.second += ms;
      }
    }
    prof_used_ = 0;
  }
  static std::string linear_name(const Weight& w, int64_t M) {
    const auto& c = cw(w);
    const char* k = c.kind == CudaWeight::Kind::W4   ? "w4"
                    : c.kind == CudaWeight::Kind::W8 ? "w8"
                                                     : "dense";
    const int64_t mb = M <= 1 ? 1 : M <= 8 ? 8 : M <= 64 ? 64 : M <= 256 ? 256 : 4096;
    return "linear " + std::string(k) + " [" + std::to_string(w.out) + " x " +
           std::to_string(w.in) + "] M<=" + std::to_string(mb);
  }
  void print_profile() {
    prof_flush();
    std::vector<std::pair<std::string, std::pair<int64_t, double>>> v(prof_sum_.begin(),
                                                                      prof_sum_.end());
    std::sort(v.begin(), v.end(),
              [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    double total = 0;
    for (const auto& e : v) total += e.second.second;
    std::fprintf(stderr,
                 "perfx cuda profile (GPU time per op, events around each op, no graphs):\n");
    std::fprintf(stderr, "  %-52s %9s %11s %9s %6s\n", "op", "calls", "total ms", "avg us",
                 "share");
    for (const auto& [name, a] : v)
      std::fprintf(stderr, "  %-52s %9lld %11.3f %9.2f %5.1f%%\n", name.c_str(), (long long)a.first,
                   a.second, 1000.0 * a.second / (double)a.first,
                   100.0 * a.second / std::max(total, 1e-9));
    for (auto& r : prof_) {
      (void)cudaEventDestroy(r.start);
      (void)cudaEventDestroy(r.stop);
    }
    prof_.clear();
  }

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

  void begin_graph_step(int n_tokens, bool fed) {
    const GraphKey key{n_tokens, width_, gen_->value.load(), fed, par_};
    if (const GraphExec* g = graphs_.find(key)) {
      state_ = State::Replaying;
      replay_ = g->exec;
      replay_argmax_ = g->argmax;
      return;
    }
    capture_argmax_ = false;
    cuda_ok(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed),
            "cudaStreamBeginCapture");
    state_ = State::Capturing;
    capture_key_ = key;
  }

  /// Ends a capture (instantiating and launching the graph) or launches the graph being replayed.
  /// Called before anything that needs the step's results, and by the next prepare_batch.
  void finish_forward() {
    if (state_ == State::Eager) return;
    if (state_ == State::Replaying) {
      state_ = State::Eager;
      cuda_ok(cudaGraphLaunch(replay_, stream_), "cudaGraphLaunch");
      return;
    }
    state_ = State::Eager;
    cudaGraph_t g = nullptr;
    cuda_ok(cudaStreamEndCapture(stream_, &g),
            "CUDA graph capture of a decode step (PERFX_CUDA_GRAPHS=0 runs without graphs)");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    (void)cudaGraphDestroy(g);
    cuda_ok(e, "cudaGraphInstantiate");
    // Graphs made over an older scratch generation can never replay again; a full cache gives
    // up its least recently replayed graph.
    graphs_.erase_if([&](const GraphKey& k) { return k.gen != capture_key_.gen; }, destroy_exec);
    if (auto old = graphs_.insert(capture_key_, GraphExec{exec, capture_argmax_}))
      destroy_exec(*old);
    ++graphs_captured_;
    cuda_ok(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  }

  void clear_graphs() { graphs_.clear(destroy_exec); }
  static void destroy_exec(const GraphExec& g) { (void)cudaGraphExecDestroy(g.exec); }

  // ---- helpers
  void launched(const char* op) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      if (state_ == State::Capturing) {  // leave capture mode before reporting
        cudaGraph_t g = nullptr;
        (void)cudaStreamEndCapture(stream_, &g);
        if (g) (void)cudaGraphDestroy(g);
        state_ = State::Eager;
      }
      cuda_ok(e, op);
    }
  }

  /// Grows the pinned staging and the device batch arrays to n int32 (outside any capture). Every
  /// growth moves the layout the graphs point into, so every graph is captured again: they start
  /// at 64 Ki entries (256 KiB each), which hold a decode step of 256 sequences at 128 blocks of
  /// table (S · (7 + width) + 1 entries, S more when fed ids are gathered); growing from the first
  /// step's size, one sequence's staging grew at its 2nd, 9th, 17th and 65th blocks.
  void ensure_staging(size_t n) {
    if (n <= staging_cap_) return;
    const size_t cap = std::max<size_t>({n, staging_cap_ * 2, 65536});
    cuda_ok(sync_streams(), "staging");
    for (int p = 0; p < n_bufs(); ++p) {
      if (pinned_[p]) (void)cudaFreeHost(pinned_[p]);
      pinned_[p] = nullptr;
      cuda_ok(cudaHostAlloc(&pinned_[p], cap * 4, cudaHostAllocDefault), "cudaHostAlloc");
      batch_dev_[p].alloc(cap * 4, "the batch layout", dev_);
    }
    staging_cap_ = cap;
    gen_->value++;
  }

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
  SampleSlot& slot_for(size_t bytes, int& index) {
    index = next_slot_;
    auto held = [&](int i) {
      for (const SampleJob& j : pending_)
        if (!j.ready && j.slot == i) return true;
      return false;
    };
    if (held(index)) index ^= 1;
    PERFX_CHECK(!held(index),
                "sample: two outstanding sample_begin draws hold both sampling "
                "slots (call sample_end first)");
    next_slot_ = index ^ 1;
    SampleSlot& sl = slots_[index];
    if (!sl.done)
      cuda_ok(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming), "cudaEventCreate");
    cuda_ok(cudaEventSynchronize(sl.done), "sample");  // its previous copies have run
    if (bytes > sl.cap) {
      const size_t cap = std::max(bytes, sl.cap * 2);
      cuda_ok(sync_streams(), "sample");  // nothing queued reads the old buffers
      if (sl.host) (void)cudaFreeHost(sl.host);
      sl.host = nullptr;
      sl.cap = 0;
      cuda_ok(cudaHostAlloc(&sl.host, cap, cudaHostAllocDefault), "cudaHostAlloc");
      sl.dev.alloc(cap, "sampling", dev_);
      sl.cap = cap;
    }
    return sl;
  }

  /// Whether this step's draw is the argmax inside its graph (PERFX_CUDA_GRAPH_ARGMAX, default
  /// 1): a graph step whose rows are greedy, without penalties, row i for token i. While the
  /// graph is captured the argmax is launched into it (PDL behind the lm_head, rows from the
  /// constant iota, ids into ids_out_, where a fed next step's embedding reads them); a replayed
  /// graph captured so runs it. Call before finish_forward().
  bool graph_argmax(const Tensor& logits, const std::vector<SampleRow>& rows) {
    static const bool on = env_switch("PERFX_CUDA_GRAPH_ARGMAX");
    if (!on || !graph_step_ || state_ == State::Eager || (int)rows.size() != n_tokens_)
      return false;
    for (size_t i = 0; i < rows.size(); ++i)  // greedy, no penalties, row i for token i
      if (rows[i].row != (int)i || rows[i].temperature > 0 || !samples_ahead_row(rows[i]))
        return false;
    if (state_ == State::Replaying) return replay_argmax_;
    launch_argmax(logits.f32(), logits.stride, static_cast<const int32_t*>(step_rows_.get()),
                  n_tokens_, (int)logits.cols, ids_out_, stream_);
    launched("argmax (in the graph)");
    capture_argmax_ = true;
    return true;
  }
  /// Queues the copy of ids_out_'s first n ids to a sampling slot; the job reads them there. With
  /// PERFX_CUDA_ASIDE_COPIES the copy runs on its own stream after the step, so the next step,
  /// queued behind this one, does not wait for it (it writes the other ids buffer).
  SampleJob copy_step_ids(int n) {
    SampleJob job;
    SampleSlot& sl = slot_for((size_t)n * 4 + 64, job.slot);
    cudaStream_t st = stream_;
    if (aside_) {
      cuda_ok(cudaEventRecord(fwd_done_, stream_), "cudaEventRecord");
      cuda_ok(cudaStreamWaitEvent(copy_stream_, fwd_done_, 0), "cudaStreamWaitEvent");
      st = copy_stream_;
    }
    if (!(skip_ & kSkipIds))  // PERFX_CUDA_SKIP=ids (timing only): the host reads stale ids
      cuda_ok(cudaMemcpyAsync(sl.host, ids_out_, (size_t)n * 4, cudaMemcpyDeviceToHost, st),
              "sampled ids");
    cuda_ok(cudaEventRecord(sl.done, st), "cudaEventRecord");
    if (aside_)  // ids_out_ is ids_[par_ ^ 1] (prepare_batch)
      cuda_ok(cudaEventRecord(ids_copied_[par_ ^ 1], st), "cudaEventRecord");
    job.out_d = ids_out_;
    job.n_rows = (size_t)n;
    for (int i = 0; i < n; ++i) job.greedy_at.push_back((size_t)i);
    return job;
  }
  /// ids_[0], ids_[1] (the graph argmax's ids, a fed step's token ids; the second used with
  /// PERFX_CUDA_ASIDE_COPIES) and step_rows_ (0, 1, ...) for n tokens; growing them (outside any
  /// capture) invalidates the graphs. They start at 64 Ki entries (768 KiB in all with the side
  /// copies, 512 without): a server's fed steps carry prompt chunks beside the decodes (up to its
  /// step budget, 4,096 tokens by default), and each growth would re-capture every graph.
  void ensure_step_ids(int n) {
    if ((size_t)n <= step_ids_cap_) return;
    const size_t cap = std::max<size_t>({(size_t)n, step_ids_cap_ * 2, 65536});
    cuda_ok(sync_streams(), "step ids");
    for (int i = 0; i < n_bufs(); ++i) {
      // A draw kept in the old buffer moves with it: a fed step with more tokens than its draw
      // had rows (new sequences joining) grows it. The new buffer exists before the old one goes.
      DevMem fresh(cap * 4, "the step's token ids", dev_);
      if (fed_d_ && fed_d_ == ids_[i].get()) {
        cuda_ok(cudaMemcpyAsync(fresh.get(), fed_d_, (size_t)fed_n_ * 4, cudaMemcpyDeviceToDevice,
                                stream_),
                "step ids");
        cuda_ok(cudaStreamSynchronize(stream_), "step ids");
        fed_d_ = static_cast<const int32_t*>(fresh.get());
      }
      ids_[i] = std::move(fresh);
    }
    step_rows_.alloc(cap * 4, "the step's rows", dev_);
    std::vector<int32_t> iota(cap);
    for (size_t i = 0; i < cap; ++i) iota[i] = (int32_t)i;
    cuda_ok(cudaMemcpy(step_rows_.get(), iota.data(), cap * 4, cudaMemcpyHostToDevice),
            "step rows");
    step_ids_cap_ = cap;
    gen_->value++;
  }

  /// The ids of a job whose slot event has completed, into ids / state (see sample_enqueue).
  void sample_collect(const SampleJob& job, int32_t* ids, std::vector<RowState>& state) {
    const int32_t* got = reinterpret_cast<const int32_t*>(
        static_cast<const char*>(slots_[job.slot].host) + job.o_out);
    auto take = [&](const std::vector<size_t>& at, size_t first) {
      for (size_t i = 0; i < at.size(); ++i) {
        const int32_t id = got[first + i];
        state[at[i]] = id >= 0 ? RowState::Picked : RowState::Penalized;
        if (id >= 0) ids[at[i]] = id;
      }
    };
    take(job.greedy_at, 0);
    take(job.soft_at, job.greedy_at.size());
    take(job.topk_at, job.greedy_at.size() + job.soft_at.size());
  }

  /// Queues Backend::sample's GPU part; false when it takes no row. For the rows it takes it
  /// applies the penalties in place, then
  /// picks: argmax for greedy rows, the softmax draw for rows with a temperature and no top-k /
  /// top-p / min-p, the top-k draw (top-p / min-p inside) for 1 <= top_k <= 1024 and for top-p /
  /// min-p without top-k (sample.cu; the reference sampler's arithmetic). After the slot's event,
  /// sample_collect sets state[i] to Picked
  /// (ids[i] written), Penalized (a row handed back: more than 1024 logits tie with its k-th, or
  /// its top-p / min-p cut lies past the 1024 most likely ids) or leaves Host (top_k > 1024;
  /// PERFX_CUDA_GPU_SAMPLING=0: every row with a temperature). Only ids cross to the host.
  bool sample_enqueue(const Tensor& logits, const std::vector<SampleRow>& rows, SampleJob& job) {
    static const bool gpu_draws = [] {
      const char* e = std::getenv("PERFX_CUDA_GPU_SAMPLING");
      return !(e && std::string(e) == "0");
    }();
    const int V = (int)logits.cols;
    std::vector<int32_t> greedy_rows;
    std::vector<size_t>&greedy_at = job.greedy_at, &soft_at = job.soft_at, &topk_at = job.topk_at;
    std::vector<SampleDraw> soft;
    std::vector<SampleDrawTopK> topk;
    std::vector<PenaltyEntry> pen;
    for (size_t i = 0; i < rows.size(); ++i) {
      const SampleRow& r = rows[i];
      const bool truncated = (r.top_k > 0 && r.top_k < V) || r.top_p < 1.0f || r.min_p > 0.0f;
      if (r.temperature <= 0) {
        greedy_rows.push_back(r.row);
        greedy_at.push_back(i);
      } else if (!gpu_draws) {
        continue;
      } else if (!truncated) {
        soft.push_back(SampleDraw{r.u, r.temperature, r.row});
        soft_at.push_back(i);
      } else if (r.top_k <= 1024 || r.top_k >= V) {  // top-k 1..1024, or top-p / min-p alone
        const int k = r.top_k > 0 && r.top_k < V ? r.top_k : 0;
        topk.push_back(SampleDrawTopK{r.u, r.temperature, r.top_p, r.min_p, k, r.row});
        topk_at.push_back(i);
      } else {
        continue;
      }
      std::map<int32_t, PenaltyEntry> merged;
      if (r.repeat_penalty != 1.0f)
        for (int32_t id : r.repeat_ids)
          if (id >= 0 && id < V) merged[id] = PenaltyEntry{r.row, id, r.repeat_penalty, 0.0f};
      if (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f)
        for (const auto& [id, cnt] : r.counts) {
          if (id < 0 || id >= V) continue;
          auto it = merged.emplace(id, PenaltyEntry{r.row, id, 1.0f, 0.0f}).first;
          it->second.subtract = r.presence_penalty + r.frequency_penalty * (float)cnt;
        }
      for (const auto& [id, e] : merged) pen.push_back(e);
    }
    const size_t n_greedy = greedy_rows.size(), n_soft = soft.size(), n_topk = topk.size();
    const size_t n_out = n_greedy + n_soft + n_topk;
    if (n_out == 0) return false;
    // staging: penalties | softmax draws | top-k draws (both 16-byte aligned) | greedy rows |
    // ids out (greedy, softmax, top-k)
    const size_t o_soft = (pen.size() * sizeof(PenaltyEntry) + 15) & ~size_t(15);
    const size_t o_topk = o_soft + n_soft * sizeof(SampleDraw);
    const size_t o_rows = o_topk + n_topk * sizeof(SampleDrawTopK);
    const size_t o_out = o_rows + n_greedy * 4;
    SampleSlot& sl = slot_for(o_out + n_out * 4 + 64, job.slot);
    char* h = static_cast<char*>(sl.host);
    char* d = static_cast<char*>(sl.dev.get());
    std::memcpy(h, pen.data(), pen.size() * sizeof(PenaltyEntry));
    std::memcpy(h + o_soft, soft.data(), n_soft * sizeof(SampleDraw));
    std::memcpy(h + o_topk, topk.data(), n_topk * sizeof(SampleDrawTopK));
    std::memcpy(h + o_rows, greedy_rows.data(), n_greedy * 4);
    cuda_ok(cudaMemcpyAsync(d, h, o_out, cudaMemcpyHostToDevice, stream_), "upload sampling rows");
    int32_t* out = reinterpret_cast<int32_t*>(d + o_out);
    launch_penalties(logits.f32(), logits.stride, reinterpret_cast<const PenaltyEntry*>(d),
                     (int)pen.size(), stream_);
    launch_argmax(logits.f32(), logits.stride, reinterpret_cast<const int32_t*>(d + o_rows),
                  (int)n_greedy, V, out, stream_);
    launch_sample_softmax(logits.f32(), logits.stride,
                          reinterpret_cast<const SampleDraw*>(d + o_soft), (int)n_soft, V,
                          out + n_greedy, stream_);
    launch_sample_top_k(logits.f32(), logits.stride,
                        reinterpret_cast<const SampleDrawTopK*>(d + o_topk), (int)n_topk, V,
                        out + n_greedy + n_soft, stream_);
    cuda_ok(cudaGetLastError(), "sample (argmax, draws)");
    cuda_ok(cudaMemcpyAsync(h + o_out, out, n_out * 4, cudaMemcpyDeviceToHost, stream_),
            "sampled ids");
    cuda_ok(cudaEventRecord(sl.done, stream_), "cudaEventRecord");
    job.o_out = o_out;
    job.out_d = out;
    return true;
  }

  /// The linear kernels' workspace, at least `need` bytes. Growing it invalidates graphs; during a
  /// capture the old buffer is kept alive until the backend ends (a graph may reference it).
  Workspace workspace(size_t need) {
    if (need > linear_ws_.size()) {
      if (state_ == State::Capturing)
        retired_.push_back(std::move(linear_ws_));
      else
        cuda_ok(cudaStreamSynchronize(stream_), "workspace");
      linear_ws_.alloc(std::max(need, linear_ws_.size() * 2), "the linear-layer workspace", dev_);
      // The graph being captured uses the new buffer: it stays valid for this bump, but not for
      // another one made during the same capture (e.g. an L2 successor learned anew).
      const uint64_t before = gen_->value++;
      if (capture_key_.gen == before) capture_key_.gen = before + 1;
    }
    return Workspace{linear_ws_.get(), linear_ws_.size()};
  }

  void* dequant_scratch(int64_t out, int64_t in) {
    return workspace((size_t)(out * in) * 2 + 256).ptr;
  }

  /// y [M, N] = x [M, K] · W[N, K]ᵀ (W in the activation dtype, row-major) + bias, on cuBLAS.
  void gemm(const void* W, int64_t N, int64_t K, const Tensor& x, const Tensor& y,
            const float* bias) {
    gemm_raw(W, N, K, x.data, (int)x.rows, x.stride, y.data, y.dtype, y.stride, bias);
  }
  void gemm_raw(const void* W, int64_t N, int64_t K, const void* x, int M, int64_t ldx, void* y,
                DType yt, int64_t ldy, const float* bias) {
    // Decode (M <= 8): a GEMV streaming each row with 16-byte loads; cuBLAS for larger M.
    if (M <= 8 && launch_dense_gemv(W, N, K, x, M, ldx, y, yt, ldy, bias, act_, stream_)) return;
    const cudaDataType_t ab = act_ == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const cudaDataType_t c = yt == DType::F32 ? CUDA_R_32F : ab;
    const float alpha = 1.0f, beta = 0.0f;
    // Column-major view: Yᵀ [N, M] = W [N, K] · Xᵀ [K, M]; row-major W [N, K] is col-major Wᵀ.
    cublas_ok(blas_->gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, M, (int)K, &alpha, W, ab,
                             (int)K, x, ab, (int)ldx, &beta, y, c, (int)ldy, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
    if (bias) launch_add_bias(y, ldy, yt, bias, M, N, stream_);
  }
  static void dense_gemm_fn(void* ctx, const void* w_dense, int64_t N, int64_t K, const void* x,
                            DType, int M, int64_t ldx, void* y, DType yt, int64_t ldy,
                            const float* bias, cudaStream_t) {
    static_cast<CudaBackend*>(ctx)->gemm_raw(w_dense, N, K, x, M, ldx, y, yt, ldy, bias);
  }

  /// Converts one dense source (F32/F16/BF16 or GGUF blocks, or int4 with mins) to the activation
  /// dtype on the host, chunk by chunk, and copies it to dst (device, [p.out, p.in]).
  void upload_dense_rows(const LinearSource& p, uint16_t* dst) {
    const int64_t rows_per_chunk =
        std::max<int64_t>(1, (64 << 20) / std::max<int64_t>(p.in * 2, 1));
    std::vector<uint16_t> host((size_t)(std::min(rows_per_chunk, p.out) * p.in));
    std::vector<float> row((size_t)p.in);
    for (int64_t r0 = 0; r0 < p.out; r0 += rows_per_chunk) {
      const int64_t n = std::min(rows_per_chunk, p.out - r0);
      for (int64_t r = 0; r < n; ++r) {
        if (p.is_int4()) {
          for (int64_t k = 0; k < p.in; ++k) row[(size_t)k] = p.int4->dequant(r0 + r, k);
        } else {
          check(is_weight_dtype(p.weight.dtype), "tensor '" + p.weight.name + "' has dtype " +
                                                     dtype_name(p.weight.dtype) +
                                                     ", not usable as a weight");
          check(
              p.weight.shape.size() == 2 && p.weight.shape[0] == p.out && p.weight.shape[1] == p.in,
              "tensor '" + p.weight.name + "' has shape " + p.weight.shape_str() + ", expected [" +
                  std::to_string(p.out) + ", " + std::to_string(p.in) + "]");
          const size_t rb = dtype_row_bytes(p.weight.dtype, p.in);
          cpu::dequantize_row(p.weight.dtype,
                              static_cast<const uint8_t*>(p.weight.data) + (size_t)(r0 + r) * rb,
                              row.data(), p.in);
        }
        for (int64_t k = 0; k < p.in; ++k)
          host[(size_t)(r * p.in + k)] = to_act_bits(row[(size_t)k], act_);
      }
      cuda_ok(
          cudaMemcpy(dst + r0 * p.in, host.data(), (size_t)(n * p.in) * 2, cudaMemcpyHostToDevice),
          "upload weight");
    }
  }

  /// Keeps a dequantized copy of a W4 / W8 weight (the activation dtype, [out, in], the packed row
  /// order) for the ladder's Dense rung (w4a16_plan / w8a16_plan: batched decode of >= 65
  /// sequences for W4, > 8 for W8, and prefill), which then runs cuBLAS on it instead of
  /// dequantizing the whole matrix on every call (out · in · 2 bytes written and read again per
  /// call; the copy is made by the same kernel, so the results are bit for bit those of the
  /// per-call path). PERFX_CUDA_DENSE_WEIGHTS: "auto" (default) while all copies together take at
  /// most kDenseShare of the GPU's memory (a 7B model on an 80 GB or larger GPU; they are made
  /// before the KV cache is sized from the free memory), "1" for every weight (out of memory is
  /// then an error), "0" never.
  void dense_copy(CudaWeight& w) {
    const size_t bytes = (size_t)(w.out * w.in) * 2;
    if (dense_budget_ == 0 || bytes > dense_budget_ - dense_total_) return;
    const std::string what = "a dequantized copy of a weight [" + std::to_string(w.out) + ", " +
                             std::to_string(w.in) + "] (PERFX_CUDA_DENSE_WEIGHTS=0: none)";
    if (dense_budget_ != SIZE_MAX) {  // auto: only where it fits with room to spare
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b < 2 * bytes) return;
    }
    w.dense.alloc(bytes, what, dev_);
    guarded("dense copy", [&] {
      if (w.w4)
        w4_dequantize(w.w4->view(), w.dense.get(), act_, w.in, stream_);
      else
        w8_dequantize(w.w8->view(), w.dense.get(), act_, w.in, stream_);
    });
    cuda_ok(cudaStreamSynchronize(stream_), "dense copy");
    dense_total_ += bytes;
  }

  /// The host copies are not needed once on the GPU: drop their pages (mmapped checkpoints).
  static void release_sources(const std::vector<LinearSource>& parts) {
    for (const auto& p : parts)
      if (!p.is_int4() && p.weight.data) release_pages(p.weight.data, p.weight.nbytes);
  }

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

}  // namespace

std::unique_ptr<Backend> create_cuda_backend(int index) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    (void)cudaGetLastError();
    throw Error(
        "no CUDA GPU found (device 'cuda:" + std::to_string(index) + "'): " +
        (e == cudaSuccess ? std::string("the driver reports none") : cudaGetErrorString(e)));
  }
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice ||
      e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string("CUDA is not usable on this machine (device 'cuda:") +
                std::to_string(index) + "'): " + cudaGetErrorName(e) + " (" +
                cudaGetErrorString(e) + "); is the NVIDIA driver installed?");
  }
  check(index >= 0 && index < n,
        "device 'cuda:" + std::to_string(index) + "' is out of range: this machine has " +
            std::to_string(n) + " CUDA GPU" + (n == 1 ? "" : "s") + " (cuda:0" +
            (n > 1 ? "..cuda:" + std::to_string(n - 1) : std::string()) + ")");
  return std::make_unique<CudaBackend>(index);
}

}  // namespace perfx::cuda
