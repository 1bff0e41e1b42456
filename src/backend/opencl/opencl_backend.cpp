// The OpenCL backend (see opencl_backend.h and docs/OPENCL.md). Host side: device memory behind
// host-address stand-ins, weight upload into the kernels' formats (split by rows over several
// buffers when one would exceed the largest allocation), the batch layout on the device, and the
// op dispatch onto kernels/*.cl with per-device tuning of the decode GEMV.
#include "backend/opencl/opencl_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cpu/qlinear.h"
#include "backend/cpu/reference.h"
#include "backend/cpu/sampling.h"
#include "backend/opencl/cl_runtime.h"
#include "core/mmap.h"
#include "core/quantized.h"
#include "perfx/status.h"

namespace perfx::opencl {
namespace {

// Weight formats (kernels/weights.cl).
constexpr int kF32 = 1, kF16 = 2, kBF16 = 3, kQ4 = 4, kQ4M = 5, kQ8 = 6;

/// "512 KiB", "35 MiB" (rounded up).
std::string mib(uint64_t b) {
  if (b < (1u << 20)) return std::to_string((b + 1023) >> 10) + " KiB";
  return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB";
}

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

bool env_is(const char* name, const char* value) {
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
  mutable int cap = 0;
};

const OclWeight& ow(const Weight& w) {
  return static_cast<const OclWeight&>(w);
}

/// Bytes of one row of each region of a slab in format wf.
struct RowBytes {
  size_t q = 0, s = 0, z = 0;
};

RowBytes row_bytes(int wf, int64_t in, int gs) {
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
constexpr GemmTiling kGemmLarge{64, 64, 4, 4}, kGemmSmall{16, 64, 2, 4}, kGemmTiny{8, 32, 2, 4};

class OpenClBackend : public Backend {
 public:
  OpenClBackend(int index, DeviceInfo dev) : index_(index), ctx_(std::move(dev)) {
    const DeviceInfo& d = ctx_.dev();
    sh_ = std::make_shared<Shared>();
    sh_->ctx = ctx_.ctx();
    sh_->total = d.global_mem;
    sh_->max_one = d.max_alloc;
    sh_->label = "opencl:" + std::to_string(index_) + " (" + d.label() + ")";
    if (const char* cap = std::getenv("PERFX_OPENCL_MAX_ALLOC"); cap && *cap) {
      const uint64_t c = parse_bytes(cap, "--max-alloc / PERFX_OPENCL_MAX_ALLOC");
      if (c < sh_->max_one) {
        sh_->max_one = c;
        sh_->capped = true;
      }
    }
    const char* dt = std::getenv("PERFX_OPENCL_DTYPE");
    const std::string want = dt ? dt : "";
    check(want.empty() || want == "f16" || want == "f32",
          "PERFX_OPENCL_DTYPE must be f16 or f32, got '" + want + "'");
    act_ = want == "f16"   ? DType::F16
           : want == "f32" ? DType::F32
           : d.fp16        ? DType::F16
                           : DType::F32;
    act_opt_ = act_ == DType::F16 ? " -DACT_F16" : "";
    images_ = d.images && !env_is("PERFX_OPENCL_IMAGES", "0") && image_format_supported();
    gpu_ = d.is_gpu();
    lanes_ = gpu_ ? 32 : 16;
    if (const char* l = std::getenv("PERFX_OPENCL_GEMV_LANES"); l && *l) {
      lanes_ = std::atoi(l);
      check(lanes_ >= 4 && lanes_ <= 256 && (lanes_ & (lanes_ - 1)) == 0,
            "PERFX_OPENCL_GEMV_LANES must be a power of two in 4..256");
    }
    tune_ = env_is("PERFX_OPENCL_TUNE", "1") || (gpu_ && !env_is("PERFX_OPENCL_TUNE", "0"));
    if (const char* sp = std::getenv("PERFX_OPENCL_ATTN_SPLIT"); sp && *sp) {
      forced_split_ = std::atoi(sp);
      check(forced_split_ >= 1 && forced_split_ <= (1 << 20),
            "PERFX_OPENCL_ATTN_SPLIT must be a number of keys per split (1..1048576)");
    }
    if (const char* r = std::getenv("PERFX_OPENCL_GEMV"); r && *r) forced_ = parse_gemv_shape(r);
    if (const char* e = std::getenv("PERFX_OPENCL_ACT_LOCAL"); e && *e) {
      check(std::string(e) == "0" || std::string(e) == "1",
            "PERFX_OPENCL_ACT_LOCAL must be 0 or 1, got '" + std::string(e) + "'");
      act_local_ = std::string(e) == "1";
    }
    norm_wg_ = (int)std::min<size_t>(gpu_ ? 256 : 64, prev_pow2(d.max_work_group));
    setup_act_q8(d);
    // Sub-group reductions in the norms where the device has cl_khr_subgroups
    // (PERFX_OPENCL_SUBGROUPS=0 / 1 forces them off / on).
    const bool subgroups = env_is("PERFX_OPENCL_SUBGROUPS", "1") ||
                           (d.subgroups && !env_is("PERFX_OPENCL_SUBGROUPS", "0"));
    norm_opts_ = act_opt_;
    if (subgroups) {
      // A driver may report the extension yet not expose its built-ins to OpenCL C 1.2 (PoCL
      // 3.1 when forced): then the local-memory reduction it is.
      try {
        for (const char* k : {"rms_norm", "add_rms_norm"})
          ctx_.kernel("rms_norm.cl", k, act_opt_ + " -DUSE_SUBGROUPS");
        norm_opts_ = act_opt_ + " -DUSE_SUBGROUPS";
      } catch (const Error& e) {
        if (env_is("PERFX_OPENCL_VERBOSE", "1"))
          std::fprintf(stderr, "perfx: %s: no sub-group reductions: %s\n", sh_->label.c_str(),
                       e.what());
      }
    }
    // Every kernel a model needs is built now (weight-format ones at load), so a kernel that fails
    // to build on this device fails the load, before any output.
    for (const char* k : {"rms_norm", "add_rms_norm"}) ctx_.kernel("rms_norm.cl", k, norm_opts_);
    for (const char* f : {"embedding", "rope_kv_store", "silu_mul", "gather_rows"})
      ctx_.kernel(std::string(f) + ".cl", f, act_opt_);
    for (const char* k : {"attention", "attention_combine"})
      ctx_.kernel("attention.cl", k, attention_opts());
    ctx_.kernel("sample.cl", "argmax_rows", sample_opts());
    if (env_is("PERFX_OPENCL_VERBOSE", "1"))
      std::fprintf(stderr,
                   "perfx: %s: %s activations, images %s, GEMV lanes %d, tuning %s, largest buffer "
                   "%s, kernel cache %s\n",
                   sh_->label.c_str(), act_ == DType::F16 ? "fp16" : "fp32", images_ ? "on" : "off",
                   lanes_, tune_ ? "on" : "off", mib(sh_->max_one).c_str(),
                   ctx_.cache_dir().empty() ? "off" : ctx_.cache_dir().c_str());
  }

  ~OpenClBackend() override { cl().clFinish(ctx_.queue()); }

  std::string name() const override { return "opencl:" + std::to_string(index_); }
  DType act_dtype() const override { return act_; }
  bool reads_host_weights() const override { return false; }
  bool device_memory(size_t* free_b, size_t* total_b) const override {
    std::lock_guard<std::mutex> lk(sh_->mu);
    *free_b = (size_t)(sh_->total - std::min(sh_->used, sh_->total));
    *total_b = (size_t)sh_->total;
    return true;
  }

  // ---------------------------------------------------------------------------------------------
  // memory

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<OclBuffer>(sh_, bytes);
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    const auto [a, off] = find(dst, bytes, "to_device");
    cl_check(cl().clEnqueueWriteBuffer(ctx_.queue(), a->mem, CL_TRUE, off, bytes, src, 0, nullptr,
                                       nullptr),
             "clEnqueueWriteBuffer (to_device)");
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    const auto [a, off] = find(src, bytes, "to_host");
    cl_check(cl().clEnqueueReadBuffer(ctx_.queue(), a->mem, CL_TRUE, off, bytes, dst, 0, nullptr,
                                      nullptr),
             "clEnqueueReadBuffer (to_host; a kernel of this step may have failed)");
  }
  void synchronize() override {
    cl_check(cl().clFinish(ctx_.queue()), "clFinish (a kernel failed)");
  }

  // ---------------------------------------------------------------------------------------------
  // weights

  std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) override {
    check(!parts.empty(), "load_linear: no parts");
    const int64_t in = parts[0].in;
    int64_t out = 0;
    for (const auto& p : parts) {
      check(p.in == in, "fused linear parts have different input widths");
      if (p.is_int4()) {
        const Int4Matrix& m = *p.int4;
        check(m.out == p.out && m.in == p.in && m.group_size > 0 && m.in % m.group_size == 0,
              "load_linear: int4 part [" + std::to_string(m.out) + ", " + std::to_string(m.in) +
                  "] does not match [" + std::to_string(p.out) + ", " + std::to_string(p.in) + "]");
      } else {
        const TensorView& t = p.weight;
        check(is_weight_dtype(t.dtype), "tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                                            ", not usable as a weight");
        check(t.shape.size() == 2 && t.shape[0] == p.out && t.shape[1] == p.in,
              "tensor '" + t.name + "' has shape " + t.shape_str() + ", expected [" +
                  std::to_string(p.out) + ", " + std::to_string(p.in) + "]");
      }
      out += p.out;
    }
    auto w = std::make_unique<OclWeight>();
    w->in = in;
    w->out = out;

    // int4 (canonical, GGUF Q4_0 / Q4_1) and int8 (GGUF Q8_0) stay quantized when the kernels take
    // their group size; anything else becomes dense.
    bool all_q4 = true, all_q8 = true;
    for (const auto& p : parts) {
      all_q4 =
          all_q4 && (p.is_int4() || p.weight.dtype == DType::Q4_0 || p.weight.dtype == DType::Q4_1);
      all_q8 = all_q8 && !p.is_int4() && p.weight.dtype == DType::Q8_0;
    }
    std::vector<Int4Matrix> dec4;
    std::vector<Int8Matrix> dec8;
    std::vector<const Int4Matrix*> m4;
    std::vector<const Int8Matrix*> m8;
    if (all_q4) {
      dec4.reserve(parts.size());
      for (const auto& p : parts) {
        if (p.is_int4()) {
          m4.push_back(p.int4.get());
        } else {
          dec4.push_back(int4_from_gguf(p.weight));
          m4.push_back(&dec4.back());
        }
      }
      const int gs = m4[0]->group_size;
      const bool mins = m4[0]->has_mins();
      for (const auto* m : m4) all_q4 = all_q4 && m->group_size == gs && m->has_mins() == mins;
      all_q4 = all_q4 && gs % 32 == 0 && in % 32 == 0;
      if (all_q4) {
        w->wf = mins ? kQ4M : kQ4;
        w->gs = gs;
      }
    } else if (all_q8) {
      dec8.reserve(parts.size());
      for (const auto& p : parts) {
        dec8.push_back(int8_from_gguf(p.weight));
        m8.push_back(&dec8.back());
      }
      w->wf = kQ8;
      w->gs = 32;
    }
    // Which part holds stacked row r, and its first row.
    std::vector<int64_t> starts;
    for (size_t i = 0, r = 0; i < parts.size(); r += (size_t)parts[i].out, ++i)
      starts.push_back((int64_t)r);
    auto locate = [&](int64_t r, size_t* pi) {
      size_t i = (size_t)(std::upper_bound(starts.begin(), starts.end(), r) - starts.begin()) - 1;
      *pi = i;
      return r - starts[i];
    };
    RowFill fill;
    if (w->wf == kQ4 || w->wf == kQ4M) {
      const int64_t G = in / w->gs;
      fill = [&, G](int64_t r, uint8_t* q, uint8_t* s, uint8_t* z) {
        size_t i;
        const int64_t lr = locate(r, &i);
        const Int4Matrix& m = *m4[i];
        std::memcpy(q, m.q.data() + lr * (in / 8), (size_t)in / 2);
        std::memcpy(s, m.scales.data() + lr * G, (size_t)G * 2);
        if (m.has_mins())
          std::memcpy(z, m.mins.data() + lr * G, (size_t)G * 2);
        else
          std::memcpy(z, m.zeros.data() + lr * G, (size_t)G);
      };
    } else if (w->wf == kQ8) {
      fill = [&](int64_t r, uint8_t* q, uint8_t* s, uint8_t*) {
        size_t i;
        const int64_t lr = locate(r, &i);
        const Int8Matrix& m = *m8[i];
        std::memcpy(q, m.q.data() + lr * in, (size_t)in);
        std::memcpy(s, m.scales.data() + lr * (in / 32), (size_t)(in / 32) * 2);
      };
    } else {
      w->wf = dense_format(parts);
      fill = dense_fill(parts, w->wf, locate);
    }
    upload(*w, fill, "weight [" + std::to_string(out) + ", " + std::to_string(in) + "]");
    release_sources(parts);
    precompile(*w);
    return w;
  }

  std::unique_ptr<Weight> load_vector(const TensorView& v) override {
    auto w = std::make_unique<OclWeight>();
    w->out = v.numel();
    w->in = 1;
    std::vector<float> host((size_t)w->out);
    float_to_f32(v.dtype, v.data, host.data(), w->out, "tensor '" + v.name + "'");
    w->vec.alloc(sh_, std::max<size_t>(host.size(), 1) * 4, "vector '" + v.name + "'");
    write(w->vec.get(), 0, host.data(), host.size() * 4);
    return w;
  }

  std::unique_ptr<Weight> load_embedding(const TensorView& table) override {
    check(table.shape.size() == 2, "embedding '" + table.name + "' is not 2-D");
    check(is_weight_dtype(table.dtype), "embedding '" + table.name + "' has dtype " +
                                            dtype_name(table.dtype) + ", not usable as a table");
    LinearSource s;
    s.weight = table;
    s.out = table.shape[0];
    s.in = table.shape[1];
    const std::vector<LinearSource> parts = {s};
    auto w = std::make_unique<OclWeight>();
    w->out = s.out;
    w->in = s.in;
    w->wf = dense_format(parts);  // rows are gathered by id: always dense
    auto locate = [](int64_t r, size_t* pi) {
      *pi = 0;
      return r;
    };
    upload(*w, dense_fill(parts, w->wf, locate), "the embedding table");
    release_sources(parts);
    precompile(*w);  // a tied lm_head runs the table through linear()
    vocab_ = std::max<int64_t>(vocab_, s.out);
    return w;
  }

  std::unique_ptr<RopeTable> load_rope(const RopeParams& p) override {
    check(p.rot_dim >= 0 && p.rot_dim <= p.head_dim && p.rot_dim % 2 == 0 &&
              (int)p.inv_freq.size() == p.rot_dim / 2,
          "load_rope: inconsistent RoPE parameters");
    auto t = std::make_unique<OclRope>();
    t->params = p;
    return t;
  }

  void check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const override {
    for (const auto& t : {types.k, types.v})
      check_kv_type(!t || *t == act_,
                    std::string("the OpenCL backend keeps the KV cache in the activation dtype (") +
                        kv_type_name(act_) + "); " + kv_type_unsupported(t.value_or(act_)) +
                        " on it");
    check_kv_shape(n_kv_heads, head_dim);
    check(head_dim % 4 == 0 && head_dim <= 256,
          "the OpenCL backend needs head_dim a multiple of 4 and at most 256, got " +
              std::to_string(head_dim));
  }

  std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size, int n_kv_heads,
                                       int head_dim, const KvCacheTypes& types) override {
    check_kv_counts(n_layers, n_blocks, block_size);
    check_kv(n_kv_heads, head_dim, types);
    auto kv = std::make_unique<OclKv>();
    kv->n_layers = n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    const size_t pool =
        (size_t)n_blocks * block_size * n_kv_heads * head_dim * dtype_block_bytes(act_);
    const std::string what = "the KV cache (" + std::to_string((int64_t)n_blocks * block_size) +
                             " tokens, " + mib(pool * 2 * (size_t)n_layers) + " in all)";
    {
      std::lock_guard<std::mutex> lk(sh_->mu);
      if (sh_->used + pool * 2 * (size_t)n_layers > sh_->total)
        throw Error("out of device memory on " + sh_->label + ": " + what + " needs " +
                    mib(pool * 2 * (size_t)n_layers) + ", " + mib(sh_->total - sh_->used) +
                    " free of " + mib(sh_->total));
    }
    for (int l = 0; l < n_layers; ++l) {  // one buffer per layer and pool: never one huge buffer
      kv->k.emplace_back(sh_, pool, what);
      kv->v.emplace_back(sh_, pool, what);
    }
    return kv;
  }

  // ---------------------------------------------------------------------------------------------
  // the step's layout: one int32 buffer [ids | positions | slots | token_seq | logit_rows | tables]

  void prepare_batch(const BatchLayout& b) override {
    const int T = b.n_tokens;
    PERFX_CHECK(T >= 0 && (b.token_ids.empty() || (int)b.token_ids.size() == T) &&
                    (b.positions.empty() || (int)b.positions.size() == T) &&
                    (b.slots.empty() || (int)b.slots.size() == T) &&
                    (b.token_seq.empty() || (int)b.token_seq.size() == T) &&
                    (int)b.block_tables.size() == b.n_seqs * b.max_blocks,
                "prepare_batch: inconsistent batch layout");
    for (int32_t id : b.token_ids)
      PERFX_CHECK(id >= 0 && (vocab_ == 0 || id < vocab_), "token id " + std::to_string(id) +
                                                               " is outside the vocabulary of " +
                                                               std::to_string(vocab_));
    max_pos_ = 0;
    for (int32_t p : b.positions) {
      PERFX_CHECK(p >= 0, "prepare_batch: negative position");
      max_pos_ = std::max(max_pos_, p);
    }
    for (int32_t s : b.token_seq)
      PERFX_CHECK(s >= 0 && s < b.n_seqs, "prepare_batch: token sequence index out of range");
    for (int32_t r : b.logit_rows)
      PERFX_CHECK(r >= 0 && r < T, "prepare_batch: logit row out of range");
    staging_.clear();
    auto put = [&](const std::vector<int32_t>& v) {
      const int off = (int)staging_.size();
      staging_.insert(staging_.end(), v.begin(), v.end());
      return off;
    };
    o_ids_ = put(b.token_ids);
    o_pos_ = put(b.positions);
    o_slots_ = put(b.slots);
    o_seq_ = put(b.token_seq);
    o_rows_ = put(b.logit_rows);
    o_tab_ = put(b.block_tables);
    staging_.push_back(0);  // never empty
    const size_t bytes = staging_.size() * 4;
    if (batch_mem_.size() < bytes)
      batch_mem_.alloc(sh_, std::max(bytes, batch_mem_.size() * 2), "the batch layout");
    write(batch_mem_.get(), 0, staging_.data(), bytes);
  }

  // ---------------------------------------------------------------------------------------------
  // ops

  void embedding(const Weight& table, const BatchLayout& b, Tensor out) override {
    const auto& w = ow(table);
    PERFX_CHECK(!w.slabs.empty() && w.wf <= kBF16 && out.dtype == act_ && out.cols == w.in &&
                    out.rows >= b.n_tokens && (int)b.token_ids.size() == b.n_tokens,
                "embedding: shape, dtype or table format mismatch");
    for (int32_t id : b.token_ids)
      PERFX_CHECK(id >= 0 && id < w.out, "token id " + std::to_string(id) +
                                             " is outside the vocabulary of " +
                                             std::to_string(w.out));
    if (b.n_tokens == 0) return;
    const Arg o = arg(out, "embedding out");
    cl_kernel k = ctx_.kernel("embedding.cl", "embedding", act_opt_);
    for (const auto& s : w.slabs) {
      const size_t g[2] = {(size_t)w.in, (size_t)b.n_tokens}, l[2] = {64, 1};
      Launch(ctx_, k)
          .arg(s.mem.get())
          .arg((int)w.wf)
          .arg((int)s.row0)
          .arg((int)s.rows)
          .arg((int)w.in)
          .arg(batch_mem_.get())
          .arg(o_ids_)
          .arg(o.mem)
          .arg(o.off)
          .arg(o.ld)
          .run(2, g, l, "embedding");
    }
  }

  void rms_norm(Tensor x, const Weight& w, float eps, Tensor out) override {
    PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && x.rows == out.rows && x.cols == out.cols &&
                    w.out == x.cols,
                "rms_norm: shape or dtype mismatch");
    if (x.rows == 0) return;
    const Arg xa = arg(x, "rms_norm x"), oa = arg(out, "rms_norm out");
    const size_t g[2] = {(size_t)norm_wg_, (size_t)x.rows}, l[2] = {(size_t)norm_wg_, 1};
    Launch(ctx_, ctx_.kernel("rms_norm.cl", "rms_norm", norm_opts_))
        .arg(xa.mem)
        .arg(xa.off)
        .arg(xa.ld)
        .arg(ow(w).vec.get())
        .arg(eps)
        .arg((int)x.cols)
        .arg(oa.mem)
        .arg(oa.off)
        .arg(oa.ld)
        .local((size_t)norm_wg_ * 4)
        .run(2, g, l, "rms_norm");
  }

  void add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps, Tensor out) override {
    PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && residual.dtype == act_ &&
                    x.rows == out.rows && residual.rows == x.rows && x.cols == out.cols &&
                    residual.cols == x.cols && w.out == x.cols,
                "add_rms_norm: shape or dtype mismatch");
    if (x.rows == 0) return;
    const Arg ra = arg(residual, "add_rms_norm residual"), xa = arg(x, "add_rms_norm x"),
              oa = arg(out, "add_rms_norm out");
    const size_t g[2] = {(size_t)norm_wg_, (size_t)x.rows}, l[2] = {(size_t)norm_wg_, 1};
    Launch(ctx_, ctx_.kernel("rms_norm.cl", "add_rms_norm", norm_opts_))
        .arg(ra.mem)
        .arg(ra.off)
        .arg(ra.ld)
        .arg(xa.mem)
        .arg(xa.off)
        .arg(xa.ld)
        .arg(ow(w).vec.get())
        .arg(eps)
        .arg((int)x.cols)
        .arg(oa.mem)
        .arg(oa.off)
        .arg(oa.ld)
        .local((size_t)norm_wg_ * 4)
        .run(2, g, l, "add_rms_norm");
  }

  void linear(Tensor x, const Weight& wt, const Weight* bias, Tensor y) override {
    const auto& w = ow(wt);
    PERFX_CHECK(!w.slabs.empty() && x.cols == w.in && y.cols == w.out && x.rows == y.rows &&
                    x.dtype == act_ && (y.dtype == act_ || y.dtype == DType::F32),
                "linear: shape or dtype mismatch");
    PERFX_CHECK(!bias || bias->out == w.out, "linear: bias length mismatch");
    const int T = (int)x.rows;
    if (T == 0) return;
    const Arg xa = arg(x, "linear x"), ya = arg(y, "linear y");
    const cl_mem bm = bias ? ow(*bias).vec.get() : dummy();
    const int y_f32 = y.dtype == DType::F32 ? 1 : 0;
    if (T == 1) {
      gemv(w, xa, bm, bias != nullptr, ya, y_f32);
      return;
    }
    const GemmTiling tl = gemm_tiling(w, T);
    const std::string opts = weight_opts(w) + " -DBM=" + std::to_string(tl.bm) +
                             " -DBN=" + std::to_string(tl.bn) + " -DTM=" + std::to_string(tl.tm) +
                             " -DTN=" + std::to_string(tl.tn) + act_opt_;
    cl_kernel k = ctx_.kernel("gemm.cl", "gemm", opts);
    for (const auto& s : w.slabs) {
      const size_t g[2] = {(size_t)((s.rows + tl.bn - 1) / tl.bn * (tl.bn / tl.tn)),
                           (size_t)((T + tl.bm - 1) / tl.bm * (tl.bm / tl.tm))};
      const size_t l[2] = {(size_t)(tl.bn / tl.tn), (size_t)(tl.bm / tl.tm)};
      Launch(ctx_, k)
          .arg(s.mem.get())
          .arg((cl_long)s.q_off)
          .arg((cl_long)s.s_off)
          .arg((cl_long)s.z_off)
          .arg((int)w.in)
          .arg((int)s.rows)
          .arg(xa.mem)
          .arg(xa.off)
          .arg(xa.ld)
          .arg(T)
          .arg(bm)
          .arg((int)s.row0)
          .arg(bias ? 1 : 0)
          .arg(ya.mem)
          .arg((cl_long)ya.off + s.row0)
          .arg(ya.ld)
          .arg(y_f32)
          .run(2, g, l, "linear (GEMM)");
    }
  }

  void rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                     const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kvs,
                     int layer, const BatchLayout& b) override {
    auto& kv = static_cast<OclKv&>(kvs);
    const auto& rt = static_cast<const OclRope&>(rope);
    const RopeParams& rp = rope.params;
    const int hd = kv.head_dim, nkv = kv.n_kv_heads, T = b.n_tokens;
    PERFX_CHECK(q.dtype == act_ && k.dtype == act_ && v.dtype == act_ && rp.head_dim == hd &&
                    q.cols == (int64_t)n_q_heads * hd && k.cols == (int64_t)nkv * hd &&
                    v.cols == k.cols && q.rows >= T && layer >= 0 && layer < kv.n_layers &&
                    (int)b.slots.size() == T && (int)b.positions.size() == T,
                "rope_kv_store: shape or dtype mismatch");
    PERFX_CHECK((q_norm == nullptr) == (k_norm == nullptr),
                "rope_kv_store: give both head norms or neither");
    const int64_t n_slots = (int64_t)kv.n_blocks * kv.block_size;
    for (int32_t s : b.slots)
      PERFX_CHECK(s >= 0 && s < n_slots, "KV slot " + std::to_string(s) + " out of range");
    if (T == 0) return;
    ensure_rope(rt, max_pos_);
    const Arg qa = arg(q, "rope q"), ka = arg(k, "rope k"), va = arg(v, "rope v");
    const size_t g[2] = {(size_t)(n_q_heads + nkv), (size_t)T}, l[2] = {16, 1};
    Launch(ctx_, ctx_.kernel("rope_kv_store.cl", "rope_kv_store", act_opt_))
        .arg(qa.mem)
        .arg(qa.off)
        .arg(qa.ld)
        .arg(ka.mem)
        .arg(ka.off)
        .arg(ka.ld)
        .arg(va.mem)
        .arg(va.off)
        .arg(va.ld)
        .arg(n_q_heads)
        .arg(nkv)
        .arg(hd)
        .arg(rp.rot_dim)
        .arg(rp.interleaved ? 1 : 0)
        .arg(q_norm ? ow(*q_norm).vec.get() : dummy())
        .arg(k_norm ? ow(*k_norm).vec.get() : dummy())
        .arg(q_norm ? 1 : 0)
        .arg(eps)
        .arg(rt.cs.get())
        .arg(rt.sn.get())
        .arg(batch_mem_.get())
        .arg(o_pos_)
        .arg(o_slots_)
        .arg(kv.k[(size_t)layer].get())
        .arg(kv.v[(size_t)layer].get())
        .arg(T)
        .run(2, g, l, "rope_kv_store");
  }

  void attention(Tensor q, const KvStorage& kvs, int layer, int n_q_heads, float scale,
                 const BatchLayout& b, Tensor out) override {
    const auto& kv = static_cast<const OclKv&>(kvs);
    const int hd = kv.head_dim, nkv = kv.n_kv_heads, T = b.n_tokens;
    PERFX_CHECK(q.dtype == act_ && out.dtype == act_ && q.cols == (int64_t)n_q_heads * hd &&
                    out.cols == q.cols && q.rows >= T && out.rows >= T && n_q_heads % nkv == 0 &&
                    layer >= 0 && layer < kv.n_layers && (int)b.positions.size() == T &&
                    (int)b.token_seq.size() == T,
                "attention: shape or dtype mismatch");
    // The blocks a token reads must exist (a bad table would read outside the cache).
    for (int t = 0; t < T; ++t) {
      const int nb = b.positions[t] / kv.block_size + 1;
      PERFX_CHECK(nb <= b.max_blocks, "attention: position past the block table");
      for (int j = 0; j < nb; ++j) {
        const int32_t blk = b.block_tables[(size_t)b.token_seq[t] * b.max_blocks + j];
        PERFX_CHECK(blk >= 0 && blk < kv.n_blocks,
                    "attention: block table entry " + std::to_string(blk) + " outside the cache");
      }
    }
    if (T == 0) return;
    const Arg qa = arg(q, "attention q"), oa = arg(out, "attention out");
    const int group = n_q_heads / nkv, chunks = (group + kAttnGroup - 1) / kAttnGroup;
    // Split-K when a decode step has too few work-groups to fill the device: each split takes a
    // range of keys (a multiple of the tile), attention_combine merges them.
    int max_keys = 0;
    for (int t = 0; t < T; ++t) max_keys = std::max(max_keys, b.positions[t] + 1);
    const int wgs = T * nkv * chunks;
    int split_len = 0;
    if (forced_split_ > 0) {
      split_len = forced_split_;
    } else if (wgs < 2 * (int)ctx_.dev().compute_units && max_keys > 2 * kAttnWg) {
      const int want = (2 * (int)ctx_.dev().compute_units + wgs - 1) / wgs;
      split_len = std::max(kAttnWg, (max_keys + want - 1) / want);
    }
    if (split_len > 0) split_len = (split_len + kAttnWg - 1) / kAttnWg * kAttnWg;
    const int n_splits = split_len > 0 ? (max_keys + split_len - 1) / split_len : 1;
    cl_mem part = dummy();
    if (n_splits > 1) {
      const size_t need = (size_t)T * n_q_heads * n_splits * (2 + hd) * 4;
      if (attn_ws_.size() < need)
        attn_ws_.alloc(sh_, std::max(need, attn_ws_.size() * 2), "the attention workspace");
      part = attn_ws_.get();
    }
    const size_t g[3] = {(size_t)kAttnWg, (size_t)(nkv * chunks), (size_t)T * n_splits},
                 l[3] = {(size_t)kAttnWg, 1, 1};
    Launch(ctx_, ctx_.kernel("attention.cl", "attention", attention_opts()))
        .arg(qa.mem)
        .arg(qa.off)
        .arg(qa.ld)
        .arg(kv.k[(size_t)layer].get())
        .arg(kv.v[(size_t)layer].get())
        .arg(oa.mem)
        .arg(oa.off)
        .arg(oa.ld)
        .arg(batch_mem_.get())
        .arg(o_pos_)
        .arg(o_seq_)
        .arg(o_tab_)
        .arg(b.max_blocks)
        .arg(kv.block_size)
        .arg(n_q_heads)
        .arg(nkv)
        .arg(hd)
        .arg(scale)
        .arg(n_splits)
        .arg(split_len)
        .arg(part)
        .run(3, g, l, "attention");
    if (n_splits > 1) {
      const size_t gc[3] = {(size_t)hd, (size_t)n_q_heads, (size_t)T},
                   lc[3] = {(size_t)std::min(hd, 64), 1, 1};
      Launch(ctx_, ctx_.kernel("attention.cl", "attention_combine", attention_opts()))
          .arg(part)
          .arg(n_splits)
          .arg(n_q_heads)
          .arg(hd)
          .arg(oa.mem)
          .arg(oa.off)
          .arg(oa.ld)
          .run(3, gc, lc, "attention (combine)");
    }
  }

  void silu_mul(Tensor gate_up, Tensor out) override {
    PERFX_CHECK(gate_up.dtype == act_ && out.dtype == act_ && gate_up.rows == out.rows &&
                    gate_up.cols == 2 * out.cols,
                "silu_mul: shape or dtype mismatch");
    if (out.rows == 0) return;
    const Arg ga = arg(gate_up, "silu_mul gate_up"), oa = arg(out, "silu_mul out");
    const size_t g[2] = {(size_t)out.cols, (size_t)out.rows}, l[2] = {64, 1};
    Launch(ctx_, ctx_.kernel("silu_mul.cl", "silu_mul", act_opt_))
        .arg(ga.mem)
        .arg(ga.off)
        .arg(ga.ld)
        .arg((int)out.cols)
        .arg(oa.mem)
        .arg(oa.off)
        .arg(oa.ld)
        .run(2, g, l, "silu_mul");
  }

  void gather_rows(Tensor x, const BatchLayout& b, Tensor out) override {
    PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && x.cols == out.cols &&
                    out.rows >= (int64_t)b.logit_rows.size(),
                "gather_rows: shape or dtype mismatch");
    for (int32_t r : b.logit_rows)
      PERFX_CHECK(r >= 0 && r < x.rows, "gather_rows: row out of range");
    if (b.logit_rows.empty()) return;
    const Arg xa = arg(x, "gather_rows x"), oa = arg(out, "gather_rows out");
    const size_t g[2] = {(size_t)x.cols, b.logit_rows.size()}, l[2] = {64, 1};
    Launch(ctx_, ctx_.kernel("gather_rows.cl", "gather_rows", act_opt_))
        .arg(xa.mem)
        .arg(xa.off)
        .arg(xa.ld)
        .arg(batch_mem_.get())
        .arg(o_rows_)
        .arg((int)x.cols)
        .arg(oa.mem)
        .arg(oa.off)
        .arg(oa.ld)
        .run(2, g, l, "gather_rows");
  }

  void sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) override {
    PERFX_CHECK(logits.dtype == DType::F32, "sample: logits must be F32");
    for (const auto& r : rows)
      PERFX_CHECK(r.row >= 0 && r.row < logits.rows, "sample: row out of range");
    // Plain greedy rows: argmax on the device, only the ids come back. Rows with penalties or a
    // temperature: the row travels to the host and the reference sampler picks.
    std::vector<int32_t> dev_rows;
    std::vector<size_t> dev_at;
    for (size_t i = 0; i < rows.size(); ++i) {
      const SampleRow& r = rows[i];
      const bool penalties =
          (r.repeat_penalty != 1.0f && !r.repeat_ids.empty()) ||
          ((r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f) && !r.counts.empty());
      if (r.temperature <= 0 && !penalties) {
        dev_rows.push_back(r.row);
        dev_at.push_back(i);
      }
    }
    if (!dev_rows.empty()) {
      const Arg la = arg(logits, "sample logits");
      const size_t n = dev_rows.size();
      if (sample_mem_.size() < n * 8)
        sample_mem_.alloc(sh_, std::max<size_t>(n * 8, 256), "sampling");
      write(sample_mem_.get(), 0, dev_rows.data(), n * 4);
      const size_t g[2] = {(size_t)kSampleWg, n}, l[2] = {(size_t)kSampleWg, 1};
      // the rows' buffer doubles as the ids' (ids after the rows)
      Launch(ctx_, ctx_.kernel("sample.cl", "argmax_rows", sample_opts()))
          .arg(la.mem)
          .arg(la.off)
          .arg(la.ld)
          .arg((int)logits.cols)
          .arg(sample_mem_.get())
          .arg((int)n)
          .run(2, g, l, "sample (argmax)");
      std::vector<int32_t> got(n);
      cl_check(cl().clEnqueueReadBuffer(ctx_.queue(), sample_mem_.get(), CL_TRUE, n * 4, n * 4,
                                        got.data(), 0, nullptr, nullptr),
               "reading sampled ids");
      for (size_t i = 0; i < n; ++i) ids[dev_at[i]] = got[i];
    }
    std::vector<float> row((size_t)logits.cols);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (std::find(dev_at.begin(), dev_at.end(), i) != dev_at.end()) continue;
      to_host(row.data(), logits.rows_view(rows[i].row, 1).data, row.size() * 4);
      ids[i] = cpu::sample_logits(row.data(), (int)logits.cols, rows[i], sample_scratch_);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // measurement (opencl_backend.h)

  BandwidthReport measure(int64_t out, int64_t in, size_t copy_bytes) {
    check(copy_bytes >= (1u << 20) && out > 0 && in > 0 && in % 128 == 0,
          "measure_gemv_bandwidth: needs a copy of at least 1 MiB and in a multiple of 128");
    BandwidthReport rep;
    // the int4 g128 weight (enough copies of it to defeat the last-level cache are made below)
    auto m = std::make_shared<Int4Matrix>();
    m->out = out;
    m->in = in;
    m->group_size = 128;
    m->q.resize((size_t)(out * in / 8));
    m->scales.resize((size_t)(out * in / 128));
    m->zeros.resize(m->scales.size());
    uint32_t s = 12345;
    for (auto& v : m->q) v = (s = s * 1664525u + 1013904223u);
    for (auto& v : m->scales)
      v = fp32_to_fp16(0.001f + (float)((s = s * 1664525u + 1013904223u) >> 24) * 1e-5f);
    for (auto& v : m->zeros) v = (uint8_t)((s = s * 1664525u + 1013904223u) >> 28);
    const size_t wbytes = m->bytes();
    // copy kernel
    const size_t n4 = copy_bytes / 16;
    DevMem a(sh_, n4 * 16, "the copy test"), b(sh_, n4 * 16, "the copy test");
    cl_check(cl().clEnqueueFillBuffer(ctx_.queue(), a.get(), "\0\0\0\0", 4, 0, n4 * 16, 0, nullptr,
                                      nullptr),
             "clEnqueueFillBuffer");
    cl_kernel ck = ctx_.kernel("copy.cl", "copy_f4", "");
    // copies n float4s at float4 offset off; its event in *ev
    auto enqueue_copy = [&](size_t n, cl_long off, cl_event* ev) {
      const size_t g[1] = {(n + 255) / 256 * 256}, l[1] = {256};
      Launch(ctx_, ck).arg(a.get()).arg(b.get()).arg((int)n).arg(off).run(1, g, l, "copy", ev);
    };
    // median device seconds of 12 copies of n float4s, the k-th at offset off(k)
    auto time_copy = [&](size_t n, auto off) {
      std::vector<double> t;
      for (int i = 0; i < 12; ++i) {
        cl_event ev = nullptr;
        enqueue_copy(n, (cl_long)off(i), &ev);
        t.push_back(event_seconds(ev));
      }
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    rep.copy_gbs = 2.0 * (double)(n4 * 16) / time_copy(n4, [](int) { return 0; }) / 1e9;
    rep.empty_us = time_copy(1, [](int) { return 0; }) * 1e6;
    const size_t n4s = std::min(wbytes / 32, n4 / 2);  // the GEMV's bytes: half read, half written
    auto same_off = [&](int i) { return (cl_long)((size_t)i * n4s % (n4 - n4s + 1)); };
    rep.copy_same_gbs = 2.0 * (double)(n4s * 16) / time_copy(n4s, same_off) / 1e9;
    {  // the same copies back to back
      EventList evs;
      for (int i = 0; i < 96; ++i) {
        cl_event ev = nullptr;
        enqueue_copy(n4s, same_off(i), &ev);
        evs.v.push_back(ev);
      }
      rep.copy_same_stream_gbs = 2.0 * (double)(n4s * 16) * 96 / events_span_seconds(evs.v) / 1e9;
    }
    a.reset();
    b.reset();
    // At least 4x the reported cache and 256 MiB in all (drivers report L1 or L2 here; an H200's L2
    // is 50 MiB), so every GEMV reads its weights from memory.
    const uint64_t span = std::max<uint64_t>(4 * ctx_.dev().global_cache, 256ull << 20);
    const int copies = (int)std::clamp<uint64_t>(span / wbytes + 1, 2, 24);
    LinearSource src;
    src.int4 = m;
    src.out = out;
    src.in = in;
    std::vector<std::unique_ptr<Weight>> ws;
    for (int i = 0; i < copies; ++i) ws.push_back(load_linear({src}));
    auto xb = alloc((size_t)in * 4 + 256), yb = alloc((size_t)out * 4 + 256);
    std::vector<float> xh((size_t)in, 0.01f);
    Tensor x{xb->data(), act_, 1, in, in}, y{yb->data(), act_, 1, out, out};
    if (act_ == DType::F16) {
      std::vector<uint16_t> xh16((size_t)in, fp32_to_fp16(0.01f));
      to_device(xb->data(), xh16.data(), xh16.size() * 2);
    } else {
      to_device(xb->data(), xh.data(), xh.size() * 4);
    }
    for (auto& w : ws) linear(x, *w, nullptr, y);  // tunes on first use
    synchronize();
    std::vector<double> us;
    for (int rep_i = 0; rep_i < 8; ++rep_i)
      for (auto& w : ws) {
        profile_ = true;
        linear(x, *w, nullptr, y);
        profile_ = false;
        us.push_back(last_kernel_seconds_ * 1e6);
      }
    std::sort(us.begin(), us.end());
    rep.gemv_us = us[us.size() / 2];
    // back to back, as in a decode step: the span of 8 rounds over the copies, per GEMV
    EventList evs;
    keep_events_ = &evs.v;
    try {
      for (int rep_i = 0; rep_i < 8; ++rep_i)
        for (auto& w : ws) linear(x, *w, nullptr, y);
    } catch (...) {
      keep_events_ = nullptr;
      throw;
    }
    keep_events_ = nullptr;
    rep.gemv_stream_us = events_span_seconds(evs.v) / (8.0 * (double)ws.size()) * 1e6;
    rep.gemv_gbs = (double)wbytes / (rep.gemv_us * 1e-6) / 1e9;
    rep.gemv_stream_gbs = (double)wbytes / (rep.gemv_stream_us * 1e-6) / 1e9;
    rep.config = last_gemv_config_;
    return rep;
  }

 private:
  static constexpr int kAttnWg = 64, kAttnGroup = 8, kSampleWg = 256;

  std::string attention_opts() const {
    return " -DWG=" + std::to_string(kAttnWg) + " -DGMAX=" + std::to_string(kAttnGroup) + act_opt_;
  }
  static std::string sample_opts() { return " -DWG=" + std::to_string(kSampleWg); }

  /// PERFX_OPENCL_GEMV's value, ROWSxRPT[g][uU] (powers of two, ROWS <= 64, RPT <= 8 and <= the
  /// lanes, U 1..8; g: scales from global memory), as a GemvConfig code; throws perfx::Error naming
  /// the value otherwise.
  int parse_gemv_shape(const std::string& r) const {
    int a = 0, b = 0, u = 2, used = 0;
    bool g = false, ok = std::sscanf(r.c_str(), "%dx%d%n", &a, &b, &used) == 2;
    std::string rest = ok ? r.substr((size_t)used) : "";
    if (ok && !rest.empty() && rest[0] == 'g') {
      g = true;
      rest.erase(0, 1);
    }
    if (ok && !rest.empty()) {
      int n = 0;
      ok = std::sscanf(rest.c_str(), "u%d%n", &u, &n) == 1 && (size_t)n == rest.size();
    }
    auto pow2 = [](int v) { return v >= 1 && (v & (v - 1)) == 0; };
    ok = ok && pow2(a) && a <= 64 && pow2(b) && b <= 8 && b <= lanes_ && u >= 1 && u <= 8;
    check(ok,
          "PERFX_OPENCL_GEMV must be ROWSxRPT[g][uU] (powers of two, ROWS <= 64, RPT <= 8; g: "
          "scales from global memory; U: chunks per lane and step, 1..8), got '" +
              r + "'");
    GemvConfig c;
    c.rows = a;
    c.rpt = b;
    c.u = u;
    c.global_scales = g;
    return c.code();
  }

  /// Builds the kernels a weight of this format will use (GEMV at its default height, both GEMM
  /// tilings), so build failures surface at load.
  void precompile(const OclWeight& w) {
    GemvConfig c;
    c.image = images_;
    c.set(forced_ > 0 ? forced_ : kGemvDefault);
    gemv_fits(w, c);
    gemm_tiling(w, 2);
    gemm_tiling(w, 64);
  }

  static size_t prev_pow2(size_t v) {
    size_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
  }

  std::pair<Shared::Alloc*, size_t> find(const void* p, size_t bytes, const char* what) const {
    std::lock_guard<std::mutex> lk(sh_->mu);
    const uintptr_t a = (uintptr_t)p;
    auto it = sh_->allocs.upper_bound(a);
    if (it != sh_->allocs.begin()) {
      --it;
      const size_t off = a - it->first;
      if (off + bytes <= it->second->size) return {it->second, off};
    }
    throw Error(std::string("OpenCL backend: ") + what +
                ": the address is not inside a buffer of this backend (or the range runs past it)");
  }

  Arg arg(const Tensor& t, const char* what) const {
    const size_t es = dtype_block_bytes(t.dtype);
    const auto [a, off] = find(t.data, std::max<size_t>(t.span_bytes(), 1), what);
    PERFX_CHECK(off % es == 0 && off / es <= (size_t)INT_MAX && t.stride <= INT_MAX,
                std::string(what) + ": misaligned or too large a tensor for the OpenCL kernels");
    return Arg{a->mem, (int)(off / es), (int)t.stride, a};
  }

  void write(cl_mem m, size_t off, const void* src, size_t bytes) {
    if (bytes == 0) return;
    cl_check(
        cl().clEnqueueWriteBuffer(ctx_.queue(), m, CL_TRUE, off, bytes, src, 0, nullptr, nullptr),
        "clEnqueueWriteBuffer");
  }

  cl_mem dummy() {
    if (!dummy_.get()) dummy_.alloc(sh_, 64, "a placeholder");
    return dummy_.get();
  }

  bool image_format_supported() {
    const cl_channel_type want = act_ == DType::F16 ? CL_HALF_FLOAT : CL_FLOAT;
    cl_uint n = 0;
    if (cl().clGetSupportedImageFormats(ctx_.ctx(), CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE1D_BUFFER,
                                        0, nullptr, &n) != CL_SUCCESS ||
        n == 0)
      return false;
    std::vector<cl_image_format> f(n);
    if (cl().clGetSupportedImageFormats(ctx_.ctx(), CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE1D_BUFFER,
                                        n, f.data(), nullptr) != CL_SUCCESS)
      return false;
    for (const auto& x : f)
      if (x.image_channel_order == CL_RGBA && x.image_channel_data_type == want) return true;
    return false;
  }

  /// The image1d_buffer (RGBA pixels of the activation dtype) over a whole buffer, or nullptr when
  /// the device cannot make one.
  cl_mem image_of(Shared::Alloc* a) {
    if (a->image_tried) return a->image;
    a->image_tried = true;
    const size_t px_bytes = 4 * dtype_block_bytes(act_);
    const size_t width = a->size / px_bytes;
    if (width == 0 || width > ctx_.dev().image_buffer_pixels) return nullptr;
    cl_image_format fmt{
        CL_RGBA, act_ == DType::F16 ? (cl_channel_type)CL_HALF_FLOAT : (cl_channel_type)CL_FLOAT};
    cl_image_desc desc{};
    desc.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER;
    desc.image_width = width;
    desc.buffer = a->mem;
    cl_int e = CL_SUCCESS;
    cl_mem img = cl().clCreateImage(ctx_.ctx(), CL_MEM_READ_ONLY, &fmt, &desc, nullptr, &e);
    if (e != CL_SUCCESS) return nullptr;
    a->image = img;
    return img;
  }

  std::string weight_opts(const OclWeight& w) const {
    std::string o = " -DWF=" + std::to_string(w.wf);
    if (w.wf == kQ4 || w.wf == kQ4M) o += " -DGS=" + std::to_string(w.gs);
    return o;
  }

  GemmTiling gemm_tiling(const OclWeight& w, int T) {
    const GemmTiling order_small[] = {kGemmSmall, kGemmTiny};
    const GemmTiling order_large[] = {kGemmLarge, kGemmSmall, kGemmTiny};
    const bool small = T <= 16;
    const GemmTiling* list = small ? order_small : order_large;
    const int n = small ? 2 : 3;
    for (int i = 0; i < n; ++i) {
      const GemmTiling& t = list[i];
      if ((size_t)t.threads() > ctx_.dev().max_work_group) continue;
      const std::string opts = weight_opts(w) + " -DBM=" + std::to_string(t.bm) +
                               " -DBN=" + std::to_string(t.bn) + " -DTM=" + std::to_string(t.tm) +
                               " -DTN=" + std::to_string(t.tn) + act_opt_;
      if (ctx_.kernel_max_work_group(ctx_.kernel("gemm.cl", "gemm", opts)) >= (size_t)t.threads())
        return t;
    }
    throw Error("the OpenCL GEMM kernel does not fit in a work-group on " + ctx_.dev().label());
  }

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
  void setup_act_q8(const DeviceInfo& d) {
    bool asked = false;  // PERFX_OPENCL_ACT_Q8=1: a build failure is an error, not a fallback
    if (const char* e = std::getenv("PERFX_OPENCL_ACT_Q8"); e && *e) {
      const std::string v = e;
      check(v == "0" || v == "1", "PERFX_OPENCL_ACT_Q8 must be 0 or 1, got '" + v + "'");
      act_q8_ = asked = v == "1";
    } else {
      act_q8_ = cpu::act_quant_enabled();
    }
    if (!act_q8_) return;
    try {
      choose_dp4a(d);
    } catch (const Error& e) {
      if (asked) throw;
      // the default on a driver that cannot build the int8 kernels: the activations' own path
      act_q8_ = false;
      if (env_is("PERFX_OPENCL_VERBOSE", "1"))
        std::fprintf(stderr, "perfx: %s: int8 activations off, their kernels do not build: %s\n",
                     sh_->label.c_str(), e.what());
      return;
    }
    if (env_is("PERFX_OPENCL_VERBOSE", "1"))
      std::fprintf(stderr, "perfx: %s: int8-activation GEMV with the %s dot product\n",
                   sh_->label.c_str(), dp4a_mode_.c_str());
  }

  /// Builds act_q8.cl and the first int8 GEMV that builds of the dot products in order of
  /// preference (PERFX_OPENCL_DP4A forces one); throws perfx::Error when none does.
  void choose_dp4a(const DeviceInfo& d) {
    // candidates in order of preference; the first whose GEMV builds is used
    std::vector<std::string> modes;
    if (const char* e = std::getenv("PERFX_OPENCL_DP4A"); e && *e) {
      const std::string m = e;
      check(m == "khr" || m == "ptx" || m == "generic",
            "PERFX_OPENCL_DP4A must be khr, ptx or generic, got '" + m + "'");
      modes.push_back(m);
    } else {
      if (d.has_extension("cl_khr_integer_dot_product")) modes.push_back("khr");
      if (d.platform_name.find("NVIDIA") != std::string::npos) modes.push_back("ptx");
    }
    if (modes.empty() || modes.back() != "generic") modes.push_back("generic");
    ctx_.kernel("act_q8.cl", "quantize_act_q8", act_opt_);
    const std::string probe = " -DWF=4 -DGS=128 -DLANES=" + std::to_string(lanes_) +
                              " -DROWS=1 -DRPT=1 -DACT_Q8" + act_opt_;
    for (const std::string& m : modes) {
      const std::string opt = m == "khr" ? " -DDP4A_KHR" : m == "ptx" ? " -DDP4A_PTX" : "";
      try {
        ctx_.kernel("gemv.cl", "gemv", probe + opt);
      } catch (const Error& e) {
        if (m == "generic") throw;
        if (env_is("PERFX_OPENCL_VERBOSE", "1"))
          std::fprintf(stderr, "perfx: %s: the %s dot product does not build: %s\n",
                       sh_->label.c_str(), m.c_str(), e.what());
        continue;
      }
      dp4a_opt_ = opt;
      dp4a_mode_ = m;
      break;
    }
    try {  // the variant that quantizes x itself; a driver that cannot build it quantizes apart
      ctx_.kernel("gemv.cl", "gemv", probe + dp4a_opt_ + " -DACT_LOCAL");
    } catch (const Error& e) {
      act_local_ = false;
      if (env_is("PERFX_OPENCL_VERBOSE", "1"))
        std::fprintf(stderr, "perfx: %s: the int8 GEMV quantizes x apart: %s\n", sh_->label.c_str(),
                     e.what());
    }
  }

  /// x (one token, `in` columns) -> q8x_ / q8s_ (act_q8.cl's layout), grown as needed.
  void quantize_act_q8(const Arg& x, int64_t in, cl_event* ev) {
    const size_t nc = (size_t)(in / 32);
    if (q8x_.size() < nc * 32) q8x_.alloc(sh_, nc * 32, "int8 activations");
    if (q8s_.size() < nc * 8) q8s_.alloc(sh_, nc * 8, "int8 activation scales");
    const size_t wg = std::min<size_t>(64, ctx_.dev().max_work_group);
    const size_t g[1] = {(nc + wg - 1) / wg * wg}, l[1] = {wg};
    Launch(ctx_, ctx_.kernel("act_q8.cl", "quantize_act_q8", act_opt_))
        .arg(x.mem)
        .arg(x.off)
        .arg((int)in)
        .arg(q8x_.get())
        .arg(q8s_.get())
        .run(1, g, l, "quantize activations (int8)", ev);
  }

  /// gemv.cl's source tag (Context::source_tag), computed once.
  const std::string& gemv_tag() {
    if (gemv_tag_.empty()) gemv_tag_ = ctx_.source_tag("gemv.cl");
    return gemv_tag_;
  }

  std::string gemv_opts(const OclWeight& w, const GemvConfig& c) const {
    std::string o = weight_opts(w) + " -DLANES=" + std::to_string(lanes_) +
                    " -DROWS=" + std::to_string(c.rows) + " -DRPT=" + std::to_string(c.rpt) +
                    " -DGEMV_U=" + std::to_string(c.u) + act_opt_;
    if (c.image) o += " -DUSE_IMAGE";
    if (c.local_scales) o += " -DLOCAL_SCALES";
    if (c.act_q8) o += " -DACT_Q8" + dp4a_opt_;
    if (c.act_local) o += " -DACT_LOCAL";
    return o;
  }

  /// Local memory the int8-activation GEMV stages the activations in (act_local): 32 bytes of
  /// int8 and 8 of (scale, sum) per chunk of 32 columns (gemv.cl), ahead of the scales; else 0.
  static size_t gemv_act_local(const OclWeight& w, const GemvConfig& c) {
    return c.act_local ? (size_t)(w.in / 32) * 40 : 0;
  }

  /// Whether shape `c` runs on this device; sets c.local_scales and c.act_local (the int8 path
  /// quantizes x itself where x fits beside the lane sums and that kernel fits a work-group, else
  /// the separate quantization runs).
  bool gemv_fits(const OclWeight& w, GemvConfig& c) {
    const bool quant = w.wf >= kQ4;
    const size_t groups = quant ? (size_t)(w.in / w.gs) : 0;
    const size_t red = (size_t)c.rows * c.rpt * lanes_ * 4;
    if ((size_t)(lanes_ * c.rows) > ctx_.dev().max_work_group || c.rpt > lanes_ ||
        red > ctx_.dev().local_mem / 2)
      return false;
    for (bool local_x : {true, false}) {
      c.act_local = local_x && c.act_q8 && act_local_ && !c.act_global;
      if (local_x && !c.act_local) continue;  // the same as the second pass
      const size_t act = gemv_act_local(w, c);
      if (red + act > ctx_.dev().local_mem / 2) continue;
      const size_t local = red + act + (size_t)c.rows * c.rpt * groups * 8;
      c.local_scales = quant && !c.global_scales && local <= ctx_.dev().local_mem / 2;
      cl_kernel k = ctx_.kernel("gemv.cl", "gemv", gemv_opts(w, c));
      if (ctx_.kernel_max_work_group(k) >= (size_t)(lanes_ * c.rows)) return true;
    }
    return false;
  }

  void run_gemv(const OclWeight& w, const Slab& s, const GemvConfig& c, const Arg& x, cl_mem ximg,
                cl_mem bias, bool has_bias, const Arg& y, int y_f32, cl_event* ev) {
    cl_kernel k = ctx_.kernel("gemv.cl", "gemv", gemv_opts(w, c));
    const int per_wg = c.rows * c.rpt;
    const size_t g[2] = {(size_t)lanes_, (size_t)((s.rows + per_wg - 1) / per_wg * c.rows)},
                 l[2] = {(size_t)lanes_, (size_t)c.rows};
    const size_t groups = w.wf >= kQ4 ? (size_t)(w.in / w.gs) : 0;
    Launch L(ctx_, k);
    L.arg(s.mem.get())
        .arg((cl_long)s.q_off)
        .arg((cl_long)s.s_off)
        .arg((cl_long)s.z_off)
        .arg((int)w.in)
        .arg((int)s.rows);
    if (c.act_q8 && !c.act_local) {  // x quantized by quantize_act_q8 (q8x_: xq then xs)
      L.arg(q8x_.get()).arg(q8s_.get()).arg(x.off);  // x_off: unused there
    } else {
      if (c.image) L.arg(ximg);
      L.arg(x.mem).arg(x.off);
    }
    L.arg(bias)
        .arg((int)s.row0)
        .arg(has_bias ? 1 : 0)
        .arg(y.mem)
        .arg((cl_long)y.off + s.row0)
        .arg(y_f32);
    L.local(std::max<size_t>(
        gemv_act_local(w, c) + (c.local_scales ? (size_t)c.rows * c.rpt * groups * 8 : 0), 16));
    L.run(2, g, l, "linear (GEMV)", ev);
  }

  void gemv(const OclWeight& w, const Arg& x, cl_mem bias, bool has_bias, const Arg& y, int y_f32) {
    GemvConfig c;
    cl_mem ximg = nullptr;
    c.act_q8 = act_q8_ && (w.wf == kQ4 || w.wf == kQ4M);
    if (!c.act_q8 && images_ && x.off % 4 == 0) ximg = image_of(x.alloc);
    c.image = ximg != nullptr;
    const std::string key = "gemv:wf" + std::to_string(w.wf) + ":gs" + std::to_string(w.gs) +
                            ":in" + std::to_string(w.in) + ":out" + std::to_string(w.out) +
                            ":lanes" + std::to_string(lanes_) +
                            (c.act_q8  ? ":q8a-" + dp4a_mode_ + (act_local_ ? "" : "-apart")
                             : c.image ? ":img"
                                       : ":buf") +
                            (act_ == DType::F16 ? ":f16" : ":f32") + ":" + gemv_tag();
    int code = -1;
    if (auto it = gemv_rows_.find(key); it != gemv_rows_.end()) {
      code = it->second;
    } else if (forced_ > 0) {
      GemvConfig t = c;
      t.set(forced_);
      check(gemv_fits(w, t), "PERFX_OPENCL_GEMV=" + std::string(std::getenv("PERFX_OPENCL_GEMV")) +
                                 " does not fit in a work-group on " + ctx_.dev().label());
      code = gemv_rows_[key] = forced_;
    } else {
      code = ctx_.tuned(key);
      GemvConfig t = c;
      t.set(std::max(code, 0));
      if (code <= 0 || !gemv_fits(w, t)) {
        code = tune_ ? tune_gemv(w, c, x, ximg, bias, has_bias, y, y_f32, key) : -1;
      }
      if (code <= 0) {  // the default, smaller when the kernel does not fit
        for (int d : {kGemvDefault, 202, 201, 101}) {
          t.set(d);
          if (gemv_fits(w, t)) {
            code = d;
            break;
          }
        }
      }
      check(code > 0,
            "the OpenCL GEMV kernel does not fit in a work-group on " + ctx_.dev().label());
      gemv_rows_[key] = code;
    }
    c.set(code);
    gemv_fits(w, c);  // sets local_scales
    last_gemv_config_ = gemv_opts(w, c);
    double dev_s = 0;
    if (c.act_q8 && !c.act_local) {  // the quantization counts as part of the GEMV
      cl_event qev = nullptr;
      quantize_act_q8(x, w.in, profile_ || keep_events_ ? &qev : nullptr);
      if (profile_)
        dev_s += event_seconds(qev);
      else if (keep_events_)
        keep_events_->push_back(qev);
    }
    for (const auto& s : w.slabs) {
      cl_event ev = nullptr;
      run_gemv(w, s, c, x, ximg, bias, has_bias, y, y_f32,
               profile_ || keep_events_ ? &ev : nullptr);
      if (profile_)
        dev_s += event_seconds(ev);
      else if (keep_events_)
        keep_events_->push_back(ev);
    }
    last_kernel_seconds_ = dev_s;
  }

  /// Times the GEMV at each configuration (GemvConfig: work-group height × rows per work-item, U,
  /// where the scales are read and, on the int8 path, where x is quantized) on this weight and
  /// keeps the fastest (results are bit-identical across them: see gemv.cl), stored in the
  /// device's tuning file. Returns the configuration's code, or -1.
  int tune_gemv(const OclWeight& w, const GemvConfig& base, const Arg& x, cl_mem ximg, cl_mem bias,
                bool has_bias, const Arg& y, int y_f32, const std::string& key) {
    int best = -1;
    double best_t = 1e30;
    std::vector<int> codes;
    // U 4 on the int8 path only, and not beside 8 rows per work-item: its two pipelined steps
    // would hold 2 · 4 · 8 uint4 of weights per work-item
    for (int u : base.act_q8 ? std::vector<int>{2, 4} : std::vector<int>{2})
      for (int shape :
           {101, 102, 104, 108, 201, 202, 204, 208, 401, 402, 404, 408, 801, 802, 804}) {
        GemvConfig c;
        c.set(shape);
        c.u = u;
        if (u == 4 && c.rpt == 8) continue;
        for (bool global_scales : {false, true}) {  // scales staged, or from global memory
          if (global_scales && w.wf < kQ4) continue;
          c.global_scales = global_scales;
          for (bool apart : {false, true}) {  // x quantized by the separate kernel
            if (apart && !base.act_q8) continue;
            c.act_global = apart;
            codes.push_back(c.code());
          }
        }
      }
    // Each timed run starts with the weight out of the device's cache, as in a decode step, where
    // the model's other weights pass between two uses of one: a fill of max(4 × the weight, 2 ×
    // the global memory cache) bytes goes first (the H200's 50 MB L2 holds a 23.6 MB weight, and
    // a shape timed from L2 need not be the fastest from DRAM); at most 256 MiB and 1/8 of the
    // device's memory, and none where that does not fit.
    const size_t flush_bytes =
        std::min<size_t>(
            {std::max<size_t>(4 * w.slabs[0].mem.size(), 2 * (size_t)ctx_.dev().global_cache),
             (size_t)256 << 20, (size_t)(ctx_.dev().global_mem / 8)}) /
        64 * 64;
    DevMem flush;
    try {  // best effort: a device with no room left for it tunes from its cache
      if (gpu_ && flush_bytes >= 64) flush.alloc(sh_, flush_bytes, "the GEMV tuner's cache flush");
    } catch (const Error&) {
    }
    for (int code : codes) {
      GemvConfig c = base;
      c.set(code);
      if (!gemv_fits(w, c)) continue;
      if (c.act_global) {  // the same as its code without the flag unless that one quantizes
        GemvConfig own = c;
        own.act_global = false;
        if (gemv_fits(w, own) && !own.act_local) continue;
      }
      // x quantized by its own kernel: timed from that kernel's start to the GEMV's end, the
      // gap between the two included (NVIDIA's OpenCL: ~6 µs, more than either's own time)
      const bool apart = c.act_q8 && !c.act_local;
      std::vector<double> t;
      for (int i = 0; i < 6; ++i) {
        if (flush.get()) try {  // a driver that allocates on first use may fail only here
            cl_check(cl().clEnqueueFillBuffer(ctx_.queue(), flush.get(), "\0\0\0\0", 4, 0,
                                              flush_bytes, 0, nullptr, nullptr),
                     "clEnqueueFillBuffer");
          } catch (const Error&) {
            flush.reset();
          }
        EventList evs;
        evs.v.assign(apart ? 2 : 1, nullptr);
        if (apart) quantize_act_q8(x, w.in, &evs.v[0]);
        run_gemv(w, w.slabs[0], c, x, ximg, bias, has_bias, y, y_f32, &evs.v.back());
        const double span = events_span_seconds(evs.v);
        if (i > 0) t.push_back(span);  // the first run warms up
      }
      std::sort(t.begin(), t.end());
      if (t[t.size() / 2] < best_t) {
        best_t = t[t.size() / 2];
        best = code;
      }
    }
    if (best > 0) ctx_.set_tuned(key, best);
    if (env_is("PERFX_OPENCL_VERBOSE", "1") && best > 0) {
      GemvConfig c;
      c.set(best);
      std::fprintf(stderr,
                   "perfx: %s: tuned %s -> %dx%d%s u%d%s (work-group height x rows per item, "
                   "%.1f us)\n",
                   sh_->label.c_str(), key.c_str(), c.rows, c.rpt,
                   c.global_scales ? " global scales" : "", c.u,
                   c.act_global ? " x quantized apart" : "", best_t * 1e6);
    }
    return best;
  }

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
  double events_span_seconds(std::vector<cl_event>& evs) {
    check(!evs.empty(), "events_span_seconds: no events");
    cl_check(cl().clWaitForEvents((cl_uint)evs.size(), evs.data()), "clWaitForEvents");
    cl_ulong a = 0, b = 0;
    cl().clGetEventProfilingInfo(evs.front(), CL_PROFILING_COMMAND_START, sizeof a, &a, nullptr);
    cl().clGetEventProfilingInfo(evs.back(), CL_PROFILING_COMMAND_END, sizeof b, &b, nullptr);
    for (cl_event e : evs) cl().clReleaseEvent(e);
    evs.clear();
    return (double)(b - a) * 1e-9;
  }

  /// Device seconds of a finished command (waits for it; releases the event).
  double event_seconds(cl_event ev) {
    cl_check(cl().clWaitForEvents(1, &ev), "clWaitForEvents");
    cl_ulong a = 0, b = 0;
    cl().clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, nullptr);
    cl().clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, nullptr);
    cl().clReleaseEvent(ev);
    return (double)(b - a) * 1e-9;
  }

  /// The dense format a weight is stored in: its own dtype when the kernels read it (F16, BF16;
  /// F32 when activations are fp32), else the activation dtype (converted at load).
  int dense_format(const std::vector<LinearSource>& parts) const {
    const DType d0 = parts[0].is_int4() ? DType::I8 : parts[0].weight.dtype;
    bool same = true;
    for (const auto& p : parts) same = same && !p.is_int4() && p.weight.dtype == d0;
    if (same && d0 == DType::F16) return kF16;
    if (same && d0 == DType::BF16) return kBF16;
    return act_ == DType::F16 ? kF16 : kF32;
  }

  template <typename Locate>
  RowFill dense_fill(const std::vector<LinearSource>& parts, int wf, Locate locate) const {
    const int64_t in = parts[0].in;
    return [&parts, wf, in, locate](int64_t r, uint8_t* q, uint8_t*, uint8_t*) {
      size_t i;
      const int64_t lr = locate(r, &i);
      const LinearSource& p = parts[i];
      if (!p.is_int4()) {
        const DType dt = p.weight.dtype;
        const size_t rb = dtype_row_bytes(dt, in);
        const uint8_t* src = static_cast<const uint8_t*>(p.weight.data) + (size_t)lr * rb;
        if ((dt == DType::F16 && wf == kF16) || (dt == DType::BF16 && wf == kBF16) ||
            (dt == DType::F32 && wf == kF32)) {
          std::memcpy(q, src, rb);
          return;
        }
        thread_local std::vector<float> row;
        row.resize((size_t)in);
        cpu::dequantize_row(dt, src, row.data(), in);
        store_row(row.data(), in, wf, q);
        return;
      }
      thread_local std::vector<float> row;
      row.resize((size_t)in);
      for (int64_t k = 0; k < in; ++k) row[(size_t)k] = p.int4->dequant(lr, k);
      store_row(row.data(), in, wf, q);
    };
  }

  static void store_row(const float* row, int64_t n, int wf, uint8_t* q) {
    if (wf == kF32) {
      std::memcpy(q, row, (size_t)n * 4);
      return;
    }
    for (int64_t k = 0; k < n; ++k) {
      const uint16_t h = fp32_to_fp16(row[k]);
      std::memcpy(q + 2 * k, &h, 2);
    }
  }

  /// Uploads a weight row by row into slabs of at most the largest allocation allowed.
  void upload(OclWeight& w, const RowFill& fill, const std::string& what) {
    const RowBytes rb = row_bytes(w.wf, w.in, w.gs);
    const size_t per_row = rb.q + rb.s + rb.z, slack = 3 * 256;
    uint64_t max_one;
    {
      std::lock_guard<std::mutex> lk(sh_->mu);
      max_one = sh_->max_one;
    }
    check(per_row + slack <= max_one, "out of device memory on " + sh_->label + ": one row of " +
                                          what + " needs " + std::to_string(per_row) +
                                          " bytes, more than the largest allocation allowed (" +
                                          mib(max_one) + ")");
    const int64_t rows_per_slab = std::max<int64_t>(1, (int64_t)((max_one - slack) / per_row));
    std::vector<uint8_t> q, s, z;
    for (int64_t r0 = 0; r0 < w.out; r0 += rows_per_slab) {
      Slab sl;
      sl.row0 = r0;
      sl.rows = std::min(rows_per_slab, w.out - r0);
      sl.q_off = 0;
      sl.s_off = align_up(rb.q * (size_t)sl.rows, 256);
      sl.z_off = align_up(sl.s_off + rb.s * (size_t)sl.rows, 256);
      const size_t total = sl.z_off + rb.z * (size_t)sl.rows;
      sl.mem.alloc(sh_, total, what);
      // staged in chunks of rows (bounded host memory)
      const int64_t chunk =
          std::max<int64_t>(1, (int64_t)((32u << 20) / std::max<size_t>(per_row, 1)));
      for (int64_t a = 0; a < sl.rows; a += chunk) {
        const int64_t n = std::min(chunk, sl.rows - a);
        q.assign(rb.q * (size_t)n, 0);
        s.assign(rb.s * (size_t)n, 0);
        z.assign(rb.z * (size_t)n, 0);
        for (int64_t i = 0; i < n; ++i)
          fill(r0 + a + i, q.data() + rb.q * (size_t)i, s.data() + rb.s * (size_t)i,
               z.data() + rb.z * (size_t)i);
        write(sl.mem.get(), sl.q_off + rb.q * (size_t)a, q.data(), q.size());
        write(sl.mem.get(), sl.s_off + rb.s * (size_t)a, s.data(), s.size());
        write(sl.mem.get(), sl.z_off + rb.z * (size_t)a, z.data(), z.size());
      }
      w.slabs.push_back(std::move(sl));
    }
    if (w.slabs.size() > 1 && env_is("PERFX_OPENCL_VERBOSE", "1"))
      std::fprintf(stderr, "perfx: %s: %s split over %zu buffers (largest allocation %s)\n",
                   sh_->label.c_str(), what.c_str(), w.slabs.size(), mib(max_one).c_str());
  }

  /// The host copies are not needed once on the device: drop their pages (mmapped checkpoints).
  static void release_sources(const std::vector<LinearSource>& parts) {
    for (const auto& p : parts)
      if (!p.is_int4() && p.weight.data) release_pages(p.weight.data, p.weight.nbytes);
  }

  /// Makes the RoPE table cover positions 0 .. max_pos: cos / sin of p · inv_freq[i] (the fp32
  /// product) in double, rounded to fp32, times attention_factor, as the CPU backend computes them.
  void ensure_rope(const OclRope& r, int max_pos) {
    const int half = r.params.rot_dim / 2;
    if (max_pos < r.cap && r.cs.get()) return;
    const int cap = std::max({max_pos + 1, r.cap * 2, 256});
    std::vector<float> cs((size_t)cap * std::max(half, 1)), sn(cs.size());
    for (int p = 0; p < cap; ++p)
      for (int i = 0; i < half; ++i) {
        const float ang = (float)p * r.params.inv_freq[(size_t)i];
        cs[(size_t)p * half + i] = (float)std::cos((double)ang) * r.params.attention_factor;
        sn[(size_t)p * half + i] = (float)std::sin((double)ang) * r.params.attention_factor;
      }
    r.cs.alloc(sh_, cs.size() * 4, "the RoPE table");
    r.sn.alloc(sh_, sn.size() * 4, "the RoPE table");
    write(r.cs.get(), 0, cs.data(), cs.size() * 4);
    write(r.sn.get(), 0, sn.data(), sn.size() * 4);
    r.cap = cap;
  }

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

}  // namespace

uint64_t parse_bytes(const std::string& s, const std::string& what) {
  size_t i = 0;
  while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
  std::string unit = s.substr(i);
  for (char& c : unit) c = (char)std::tolower((unsigned char)c);
  uint64_t mul = 0;
  if (unit.empty() || unit == "b")
    mul = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb")
    mul = 1ull << 10;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    mul = 1ull << 20;
  else if (unit == "g" || unit == "gib" || unit == "gb")
    mul = 1ull << 30;
  check(i > 0 && i <= 15 && mul != 0,
        what + ": '" + s + "' is not a byte count (e.g. 1GiB, 512MiB, 1048576)");
  const uint64_t v = std::stoull(s.substr(0, i)) * mul;
  check(v > 0, what + ": must be more than 0 bytes");
  return v;
}

std::unique_ptr<Backend> create_opencl_backend(int index) {
  return std::make_unique<OpenClBackend>(index, select_device(index));
}

BandwidthReport measure_gemv_bandwidth(Backend& be, int64_t out, int64_t in, size_t copy_bytes) {
  auto* b = dynamic_cast<OpenClBackend*>(&be);
  check(b != nullptr, "measure_gemv_bandwidth: not an OpenCL backend");
  return b->measure(out, in, copy_bytes);
}

}  // namespace perfx::opencl
