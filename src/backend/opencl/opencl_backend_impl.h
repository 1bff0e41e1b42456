// The OpenCL backend's class, shared by the files that define its members (opencl_backend.h is
// the public entry point). One concern per file:
//   opencl_backend.cpp  construction, device memory behind host-address stand-ins, the batch
//                       layout on the device, events, create_opencl_backend()
//   opencl_weights.cpp  weight upload into the kernels' formats (split by rows over several
//                       buffers when one would exceed the largest allocation), the KV cache
//   opencl_ops.cpp      the forward pass's ops onto kernels/*.cl
//   opencl_gemv.cpp     the decode GEMV: int8 activations, per-device tuning, the bandwidth probe
// Internal to src/backend/opencl: nothing outside these files includes it.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/opencl/cl_runtime.h"
#include "backend/opencl/opencl_backend.h"
#include "core/quantized.h"
#include "perfx/status.h"

namespace perfx::opencl::backend_impl {

// Weight formats (kernels/weights.cl).
inline constexpr int kF32 = 1, kF16 = 2, kBF16 = 3, kQ4 = 4, kQ4M = 5, kQ8 = 6;

/// "512 KiB", "35 MiB" (rounded up).
inline std::string mib(uint64_t b) {
  if (b < (1u << 20)) return std::to_string((b + 1023) >> 10) + " KiB";
  return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB";
}

inline size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::string(e) == value;
}

/// Device memory shared by the backend and everything it hands out (weights, KV, buffers), so
/// that objects may outlive the backend object itself.
struct Shared {
  std::mutex mu;
  uint64_t used = 0;     // bytes held on the device
  uint64_t total = 0;    // CL_DEVICE_GLOBAL_MEM_SIZE
  uint64_t max_one = 0;  // the largest single buffer allowed (device limit or the user's cap)
  bool capped = false;   // max_one comes from PERFX_OPENCL_MAX_ALLOC / --max-alloc
  std::string label;     // "opencl:0 (NVIDIA H200 [NVIDIA CUDA])"
  cl_context ctx = nullptr;
  struct Alloc {
    cl_mem mem = nullptr;
    size_t size = 0;
    cl_mem image = nullptr;  // image1d_buffer over `mem`, made on first use by the GEMV
    bool image_tried = false;
  };
  std::map<uintptr_t, Alloc*> allocs;  // by the host address standing for the buffer
};

/// Fault injection (tests only): with PERFX_OPENCL_FAULT_ALLOC_AFTER=N set, N more device buffer
/// allocations succeed — counted from the first one that sees this value set, after one saw it
/// unset or set to another value (text after the number is ignored: "0#7" restarts a count of 0)
/// — and the ones after fail as out of device memory (docs/RELIABILITY.md, "Fault injection").
inline bool fault_alloc_now() {
  static std::mutex mu;
  static std::string seen;
  static long left = 0;
  const char* v = std::getenv("PERFX_OPENCL_FAULT_ALLOC_AFTER");
  std::lock_guard<std::mutex> lk(mu);
  if (v == nullptr || *v == '\0') {
    seen.clear();
    return false;
  }
  if (seen != v) {
    seen = v;
    left = std::strtol(v, nullptr, 10);
  }
  return left-- <= 0;
}

/// One device buffer; its bytes count against the device's memory until destroyed.
class DevMem {
 public:
  DevMem() = default;
  DevMem(std::shared_ptr<Shared> sh, size_t bytes, const std::string& what) {
    alloc(std::move(sh), bytes, what);
  }
  ~DevMem() { reset(); }
  DevMem(DevMem&& o) noexcept : sh_(std::move(o.sh_)), mem_(o.mem_), n_(o.n_) {
    o.mem_ = nullptr;
    o.n_ = 0;
  }
  DevMem& operator=(DevMem&& o) noexcept {
    if (this != &o) {
      reset();
      sh_ = std::move(o.sh_);
      mem_ = o.mem_;
      n_ = o.n_;
      o.mem_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  void alloc(std::shared_ptr<Shared> sh, size_t bytes, const std::string& what) {
    reset();
    sh_ = std::move(sh);
    {
      std::lock_guard<std::mutex> lk(sh_->mu);
      if (bytes > sh_->max_one)
        throw Error("out of device memory on " + sh_->label + ": " + what + " needs " + mib(bytes) +
                    " in one buffer, more than the largest allocation allowed (" +
                    mib(sh_->max_one) +
                    (sh_->capped ? ", set by --max-alloc / PERFX_OPENCL_MAX_ALLOC)"
                                 : ", CL_DEVICE_MAX_MEM_ALLOC_SIZE)"));
      if (sh_->used + bytes > sh_->total)
        throw Error("out of device memory on " + sh_->label + ": " + what + " needs " + mib(bytes) +
                    ", " + mib(sh_->total - sh_->used) + " free of " + mib(sh_->total));
    }
    if (fault_alloc_now())
      throw Error("out of device memory on " + sh_->label + ": " + what + " needs " + mib(bytes) +
                  " (PERFX_OPENCL_FAULT_ALLOC_AFTER)");
    cl_int e = CL_SUCCESS;
    mem_ =
        cl().clCreateBuffer(sh_->ctx, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 64), nullptr, &e);
    if (e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ||
        e == CL_OUT_OF_HOST_MEMORY || e == CL_INVALID_BUFFER_SIZE)
      throw Error("out of device memory on " + sh_->label + ": " + what + " needs " + mib(bytes) +
                  " (" + cl_error_name(e) + ")");
    cl_check(e, "clCreateBuffer for " + what);
    n_ = bytes;
    std::lock_guard<std::mutex> lk(sh_->mu);
    sh_->used += bytes;
  }
  void reset() {
    if (mem_) {
      cl().clReleaseMemObject(mem_);
      std::lock_guard<std::mutex> lk(sh_->mu);
      sh_->used -= n_;
    }
    mem_ = nullptr;
    n_ = 0;
  }
  cl_mem get() const { return mem_; }
  size_t size() const { return n_; }

 private:
  std::shared_ptr<Shared> sh_;
  cl_mem mem_ = nullptr;
  size_t n_ = 0;
};

/// A Buffer: device memory plus a reserved (inaccessible) range of host addresses standing for
/// it, so Tensor views can do pointer arithmetic; the backend maps an address back to (buffer,
/// offset).
class OclBuffer : public Buffer {
 public:
  OclBuffer(std::shared_ptr<Shared> sh, size_t bytes) : sh_(sh), mem_(sh, bytes, "a buffer") {
    span_ = align_up(std::max<size_t>(bytes, 1), 4096);
    void* p = ::mmap(nullptr, span_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw Error("out of host address space reserving " + mib(bytes));
    base_ = p;
    alloc_.mem = mem_.get();
    alloc_.size = bytes;
    std::lock_guard<std::mutex> lk(sh_->mu);
    sh_->allocs[(uintptr_t)base_] = &alloc_;
  }
  ~OclBuffer() override {
    {
      std::lock_guard<std::mutex> lk(sh_->mu);
      sh_->allocs.erase((uintptr_t)base_);
    }
    if (alloc_.image) cl().clReleaseMemObject(alloc_.image);
    ::munmap(base_, span_);
  }
  void* data() override { return base_; }
  size_t size() const override { return alloc_.size; }

 private:
  std::shared_ptr<Shared> sh_;
  DevMem mem_;
  Shared::Alloc alloc_;
  void* base_ = nullptr;
  size_t span_ = 0;
};

/// Rows [row0, row0 + rows) of a weight in one buffer: regions at q_off (values), s_off (scales)
/// and z_off (zeros or mins), per kernels/weights.cl.
struct Slab {
  DevMem mem;
  int64_t row0 = 0, rows = 0;
  size_t q_off = 0, s_off = 0, z_off = 0;
};

class OclWeight : public Weight {
 public:
  int wf = 0, gs = 0;       // format (weights.cl) and group size
  std::vector<Slab> slabs;  // a matrix
  DevMem vec;               // a vector: fp32 [out]
  size_t bytes() const override {
    size_t b = vec.size();
    for (const auto& s : slabs) b += s.mem.size();
    return b;
  }
};

class OclKv : public KvStorage {
 public:
  std::vector<DevMem> k, v;  // per layer: [slots, n_kv_heads * head_dim] in the activation dtype
  size_t bytes() const override {
    size_t b = 0;
    for (const auto& m : k) b += m.size();
    for (const auto& m : v) b += m.size();
    return b;
  }
};

class OclRope : public RopeTable {
 public:
  // cos / sin [cap, rot_dim / 2], grown when a step reaches a later position
  mutable DevMem cs, sn;
  mutable int64_t cap = 0;  // positions a table holds (int64: past INT_MAX when doubled)
};

inline const OclWeight& ow(const Weight& w) {
  return static_cast<const OclWeight&>(w);
}

/// Bytes of one row of each region of a slab in format wf.
struct RowBytes {
  size_t q = 0, s = 0, z = 0;
};

inline RowBytes row_bytes(int wf, int64_t in, int gs) {
  switch (wf) {
    case kF32:
      return {(size_t)in * 4, 0, 0};
    case kF16:
    case kBF16:
      return {(size_t)in * 2, 0, 0};
    case kQ4:
      return {(size_t)in / 2, (size_t)(in / gs) * 2, (size_t)(in / gs)};
    case kQ4M:
      return {(size_t)in / 2, (size_t)(in / gs) * 2, (size_t)(in / gs) * 2};
    case kQ8:
      return {(size_t)in, (size_t)(in / 32) * 2, 0};
    default:
      return {};
  }
}

/// Fills row r of the stacked weight into its three regions.
using RowFill = std::function<void(int64_t r, uint8_t* q, uint8_t* s, uint8_t* z)>;

/// A tensor argument: buffer, element offset, row stride in elements.
struct Arg {
  cl_mem mem = nullptr;
  int off = 0;
  int ld = 0;
  Shared::Alloc* alloc = nullptr;
};

struct GemmTiling {
  int bm, bn, tm, tn;
  int threads() const { return (bn / tn) * (bm / tm); }
};
inline constexpr GemmTiling kGemmLarge{64, 64, 4, 4}, kGemmSmall{16, 64, 2, 4},
    kGemmTiny{8, 32, 2, 4};

class OpenClBackend : public Backend {
 public:
  OpenClBackend(int index, DeviceInfo dev);

  ~OpenClBackend() override { cl().clFinish(ctx_.queue()); }

  std::string name() const override { return "opencl:" + std::to_string(index_); }
  DType act_dtype() const override { return act_; }
  bool reads_host_weights() const override { return false; }
  bool device_memory(size_t* free_b, size_t* total_b) const override;

  // ---------------------------------------------------------------------------------------------
  // memory

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  void to_device(void* dst, const void* src, size_t bytes) override;
  void to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;

  // ---------------------------------------------------------------------------------------------
  // weights

  std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) override;
  std::unique_ptr<Weight> load_vector(const TensorView& v) override;
  std::unique_ptr<Weight> load_embedding(const TensorView& table) override;
  std::unique_ptr<RopeTable> load_rope(const RopeParams& p) override;
  void check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const override;
  std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size, int n_kv_heads,
                                       int head_dim, const KvCacheTypes& types) override;

  // ---------------------------------------------------------------------------------------------
  // the step's layout: one int32 buffer [ids | positions | slots | token_seq | logit_rows | tables]

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
  void silu_mul(Tensor gate_up, Tensor out) override;
  void gather_rows(Tensor x, const BatchLayout& b, Tensor out) override;
  void sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) override;

  // ---------------------------------------------------------------------------------------------
  // measurement (opencl_backend.h)

  BandwidthReport measure(int64_t out, int64_t in, size_t copy_bytes);

 private:
  static constexpr int kAttnWg = 64, kAttnGroup = 8, kSampleWg = 256;

  std::string attention_opts() const {
    return " -DWG=" + std::to_string(kAttnWg) + " -DGMAX=" + std::to_string(kAttnGroup) + act_opt_;
  }
  static std::string sample_opts() { return " -DWG=" + std::to_string(kSampleWg); }

  /// PERFX_OPENCL_GEMV's value, ROWSxRPT[g][uU] (powers of two, ROWS <= 64, RPT <= 8 and <= the
  /// lanes, U 1..8; g: scales from global memory), as a GemvConfig code; throws perfx::Error naming
  /// the value otherwise.
  int parse_gemv_shape(const std::string& r) const;

  /// Builds the kernels a weight of this format will use (GEMV at its default height, both GEMM
  /// tilings), so build failures surface at load.
  void precompile(const OclWeight& w);

  static size_t prev_pow2(size_t v) {
    size_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
  }

  std::pair<Shared::Alloc*, size_t> find(const void* p, size_t bytes, const char* what) const;
  Arg arg(const Tensor& t, const char* what) const;
  void write(cl_mem m, size_t off, const void* src, size_t bytes);
  cl_mem dummy();
  bool image_format_supported();

  /// The image1d_buffer (RGBA pixels of the activation dtype) over a whole buffer, or nullptr when
  /// the device cannot make one.
  cl_mem image_of(Shared::Alloc* a);

  std::string weight_opts(const OclWeight& w) const;
  GemmTiling gemm_tiling(const OclWeight& w, int T);

  /// GEMV shape: work-group height `rows` (work-items along the rows) × `rpt` rows per work-item,
  /// stored as rows · 100 + rpt in the tuning file.
  /// `global_scales` (code + 10000): quantized formats read scales from global memory (cached)
  /// instead of staging them in local memory first; a prologue less for short rows.
  /// `u` (code + u · 100000; 0 reads as 2, gemv.cl's GEMV_U): chunks per lane and step, so
  /// u · rpt weight loads in flight per work-item (twice that on the pipelined int8 path).
  /// `act_global` (code + 1000000): the int8 path has act_q8.cl quantize x first even where the
  /// GEMV could quantize it into local memory itself (act_local); tuning times both, the separate
  /// kernel included (many work-groups each quantizing x can cost more than one kernel more).
  struct GemvConfig {
    int rows = 2, rpt = 4, u = 2;
    bool act_global = false;
    bool image = false, local_scales = false, global_scales = false;
    bool act_q8 = false;     // int8 activations (gemv.cl -DACT_Q8): not part of the tuned code
    bool act_local = false;  // ... quantized by the GEMV into local memory (-DACT_LOCAL;
                             // gemv_fits sets it) instead of by quantize_act_q8 first
    void set(int code) {
      act_global = code >= 1000000;
      code %= 1000000;
      u = code / 100000 > 0 ? code / 100000 : 2;
      global_scales = code % 100000 >= 10000;
      rows = code % 10000 / 100;
      rpt = code % 100;
    }
    int code() const {
      return (act_global ? 1000000 : 0) + (u == 2 ? 0 : u * 100000) + (global_scales ? 10000 : 0) +
             rows * 100 + rpt;
    }
    /// The shapes gemv.cl takes: ROWS and RPT powers of two, ROWS <= 64, RPT <= 8 and <= lanes,
    /// 1..8 chunks a step (a code from a corrupted tuning file may decode to anything).
    bool valid(int lanes) const {
      auto pow2 = [](int v) { return v >= 1 && (v & (v - 1)) == 0; };
      return pow2(rows) && rows <= 64 && pow2(rpt) && rpt <= 8 && rpt <= lanes && u >= 1 && u <= 8;
    }
  };
  static constexpr int kGemvDefault = 204;

  /// Int8 activations for the int4 decode GEMV: on by default, as on the CPU (measured on NVIDIA's
  /// OpenCL: Llama-2-7B-shape AWQ decode 176 vs 151 tok/s, docs/OPENCL.md); PERFX_OPENCL_ACT_Q8=0
  /// (or PERFX_ACT_QUANT=off, the CPU's switch, when PERFX_OPENCL_ACT_Q8 is unset) keeps the
  /// activations in their dtype. Picks the dot-product instruction
  /// (PERFX_OPENCL_DP4A=khr|ptx|generic forces one): cl_khr_integer_dot_product where the device
  /// has it, dp4a through inline PTX on NVIDIA's platform, else four multiply-adds; a choice whose
  /// GEMV does not build falls back to the generic one (named on stderr with
  /// PERFX_OPENCL_VERBOSE=1). By default, a device that builds none keeps the activations' own
  /// path; with PERFX_OPENCL_ACT_Q8=1 that is an error.
  void setup_act_q8(const DeviceInfo& d);

  /// Builds act_q8.cl and the first int8 GEMV that builds of the dot products in order of
  /// preference (PERFX_OPENCL_DP4A forces one); throws perfx::Error when none does.
  void choose_dp4a(const DeviceInfo& d);

  /// x (one token, `in` columns) -> q8x_ / q8s_ (act_q8.cl's layout), grown as needed.
  void quantize_act_q8(const Arg& x, int64_t in, cl_event* ev);

  /// gemv.cl's source tag (Context::source_tag), computed once.
  const std::string& gemv_tag() {
    if (gemv_tag_.empty()) gemv_tag_ = ctx_.source_tag("gemv.cl");
    return gemv_tag_;
  }

  std::string gemv_opts(const OclWeight& w, const GemvConfig& c) const;

  /// Local memory the int8-activation GEMV stages the activations in (act_local): 32 bytes of
  /// int8 and 8 of (scale, sum) per chunk of 32 columns (gemv.cl), ahead of the scales; else 0.
  static size_t gemv_act_local(const OclWeight& w, const GemvConfig& c) {
    return c.act_local ? (size_t)(w.in / 32) * 40 : 0;
  }

  /// Whether shape `c` runs on this device; sets c.local_scales and c.act_local (the int8 path
  /// quantizes x itself where x fits beside the lane sums and that kernel fits a work-group, else
  /// the separate quantization runs).
  bool gemv_fits(const OclWeight& w, GemvConfig& c);

  void run_gemv(const OclWeight& w, const Slab& s, const GemvConfig& c, const Arg& x, cl_mem ximg,
                cl_mem bias, bool has_bias, const Arg& y, int y_f32, cl_event* ev);
  void gemv(const OclWeight& w, const Arg& x, cl_mem bias, bool has_bias, const Arg& y, int y_f32);

  /// Times the GEMV at each configuration (GemvConfig: work-group height × rows per work-item, U,
  /// where the scales are read and, on the int8 path, where x is quantized) on this weight and
  /// keeps the fastest (results are bit-identical across them: see gemv.cl), stored in the
  /// device's tuning file. Returns the configuration's code, or -1.
  int tune_gemv(const OclWeight& w, const GemvConfig& base, const Arg& x, cl_mem ximg, cl_mem bias,
                bool has_bias, const Arg& y, int y_f32, const std::string& key);

  /// Events released when it goes out of scope (also when a launch throws).
  struct EventList {
    std::vector<cl_event> v;
    ~EventList() {
      for (cl_event e : v)
        if (e) cl().clReleaseEvent(e);
    }
  };

  /// Device seconds from the start of the first of `evs` to the end of the last (non-empty;
  /// releases them and empties the list).
  double events_span_seconds(std::vector<cl_event>& evs);

  /// Device seconds of a finished command (waits for it; releases the event).
  double event_seconds(cl_event ev);

  /// The dense format a weight is stored in: its own dtype when the kernels read it (F16, BF16;
  /// F32 when activations are fp32), else the activation dtype (converted at load).
  int dense_format(const std::vector<LinearSource>& parts) const;

  template <typename Locate>
  RowFill dense_fill(const std::vector<LinearSource>& parts, int wf, Locate locate) const;
  static void store_row(const float* row, int64_t n, int wf, uint8_t* q);

  /// Uploads a weight row by row into slabs of at most the largest allocation allowed.
  void upload(OclWeight& w, const RowFill& fill, const std::string& what);

  /// The host copies are not needed once on the device: drop their pages (mmapped checkpoints).
  static void release_sources(const std::vector<LinearSource>& parts);

  /// Makes the RoPE table cover positions 0 .. max_pos: cos / sin of p · inv_freq[i] (the fp32
  /// product) in double, rounded to fp32, times attention_factor, as the CPU backend computes them.
  void ensure_rope(const OclRope& r, int max_pos);

  int index_;
  Context ctx_;
  std::shared_ptr<Shared> sh_;
  DType act_ = DType::F32;
  std::string act_opt_, norm_opts_;
  bool images_ = false, gpu_ = false, tune_ = false;
  int lanes_ = 32, norm_wg_ = 64, forced_ = 0, forced_split_ = 0;
  int64_t vocab_ = 0;
  std::map<std::string, int> gemv_rows_;
  bool act_q8_ = false;  // int8 activations for the int4 GEMV (PERFX_OPENCL_ACT_Q8, setup_act_q8)
  // ... quantized by the GEMV into local memory where they fit (PERFX_OPENCL_ACT_LOCAL=0: never)
  bool act_local_ = true;
  std::string dp4a_opt_;   // " -DDP4A_KHR" / " -DDP4A_PTX" / "" (generic)
  std::string dp4a_mode_;  // "khr" / "ptx" / "generic" (the tuning key's part)
  DevMem q8x_, q8s_;       // quantize_act_q8's output
  bool profile_ = false;
  double last_kernel_seconds_ = 0;
  std::vector<cl_event>* keep_events_ = nullptr;  // measure(): the GEMVs' events, kept
  std::string gemv_tag_;
  std::string last_gemv_config_;

  // the prepared step
  DevMem batch_mem_, sample_mem_, dummy_, attn_ws_;
  std::vector<int32_t> staging_;
  int o_ids_ = 0, o_pos_ = 0, o_slots_ = 0, o_seq_ = 0, o_rows_ = 0, o_tab_ = 0;
  int max_pos_ = 0;
  std::vector<std::pair<float, int32_t>> sample_scratch_;
};

}  // namespace perfx::opencl::backend_impl
