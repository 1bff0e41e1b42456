// CPU backend: the Backend ops over fp32 activations, multithreaded with a ThreadPool.
#include "backend/cpu/cpu_backend.h"

#include <sys/mman.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/qlinear.h"
#include "backend/cpu/reference.h"
#include "backend/cpu/sampling.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/w4a16.h"
#include "core/mmap.h"
#include "core/thread_pool.h"
#include "perfx/status.h"

namespace perfx::cpu {
namespace {

/// Host memory from anonymous mmap: zero pages are not resident until written, so a large KV pool
/// costs RSS only for the blocks in use.
class CpuBuffer : public Buffer {
 public:
  explicit CpuBuffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    // MAP_NORESERVE: a large KV pool is fine as long as the blocks actually used fit in memory.
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;  // before the message's allocations, which may change errno
      throw Error("out of memory allocating " + std::to_string(bytes >> 20) +
                  " MiB (mmap: " + std::strerror(err) + "; " + kLowerMemoryAdvice + ")");
    }
    data_ = p;
  }
  ~CpuBuffer() override {
    if (data_) ::munmap(data_, size_);
  }
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_;
};

/// One row-block of a (possibly fused) weight: dense rows read in place, the loader's canonical
/// int4 matrix (exact fp32-activation kernels), or a QMatrix repacked for the int8-activation
/// kernels (which may cover several fused sources).
struct Part {
  int64_t row0 = 0, rows = 0;
  DType dtype = DType::F32;
  const uint8_t* data = nullptr;  // dense: [rows, in] in `dtype`
  size_t row_bytes = 0;
  std::shared_ptr<const W4A16Matrix> w4;  // the loader's canonical matrix, read as is
  std::shared_ptr<const QMatrix> qm;      // repacked for int8 activations
  std::shared_ptr<uint8_t> owned;         // a dense copy in huge-page memory (`data` points here)
  std::shared_ptr<const void> source_owner;  // LinearSource::owner, while `data` points into it
};

class CpuWeight : public Weight {
 public:
  std::vector<Part> parts;
  std::vector<float> vec;  // load_vector
  size_t bytes() const override {
    size_t b = vec.size() * sizeof(float);
    for (auto& p : parts)
      b += p.qm ? p.qm->bytes() : p.w4 ? p.w4->bytes() : p.row_bytes * (size_t)p.rows;
    return b;
  }
};

class CpuKv : public KvStorage {
 public:
  std::unique_ptr<CpuBuffer> buf;
  DType kdt = DType::F32, vdt = DType::F32;
  size_t k_slot = 0, v_slot = 0;  // bytes per slot (n_kv_heads · head_dim elements)
  size_t k_head = 0, v_head = 0;  // bytes per head within a slot
  size_t layer_bytes = 0, v_offset = 0;
  size_t bytes() const override { return buf->size(); }
  uint8_t* k_raw(int layer, int64_t slot) const {
    return static_cast<uint8_t*>(buf->data()) + layer * layer_bytes + slot * k_slot;
  }
  uint8_t* v_raw(int layer, int64_t slot) const {
    return static_cast<uint8_t*>(buf->data()) + layer * layer_bytes + v_offset + slot * v_slot;
  }
  /// The view of one KV head of `layer` through a sequence's block table.
  PagedKv paged(int layer, int kvh, const int32_t* table) const {
    PagedKv pk;
    pk.slot_stride = (int64_t)n_kv_heads * head_dim;
    pk.table = table;
    pk.block_size = block_size;
    pk.k_dtype = kdt;
    pk.v_dtype = vdt;
    pk.k_slot_bytes = (int64_t)k_slot;
    pk.v_slot_bytes = (int64_t)v_slot;
    if (kdt == DType::F32)
      pk.k_base = reinterpret_cast<const float*>(k_raw(layer, 0)) + kvh * head_dim;
    else
      pk.k_raw = k_raw(layer, 0) + kvh * k_head;
    if (vdt == DType::F32)
      pk.v_base = reinterpret_cast<const float*>(v_raw(layer, 0)) + kvh * head_dim;
    else
      pk.v_raw = v_raw(layer, 0) + kvh * v_head;
    return pk;
  }
};

/// Stores n fp32 values as `dt` (F32, F16, or Q8_0 blocks of 32: d = max|x| / 127, q = round(x /
/// d)).
void store_row(DType dt, const float* x, int64_t n, uint8_t* dst) {
  if (dt == DType::F32) {
    std::memcpy(dst, x, (size_t)n * sizeof(float));
  } else if (dt == DType::F16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = fp32_to_fp16(x[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  } else {  // Q8_0
    for (int64_t b = 0; b < n / 32; ++b) {
      const float* xb = x + 32 * b;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
      const uint16_t dh = fp32_to_fp16(d);
      uint8_t* blk = dst + 34 * b;
      std::memcpy(blk, &dh, 2);
      for (int i = 0; i < 32; ++i)
        blk[2 + i] = (uint8_t)(int8_t)std::clamp((int)std::nearbyint(xb[i] * id), -127, 127);
    }
  }
}

/// A dense part (F32/F16/BF16/GGUF block types) as fp32 panels for gemm_nt. Column offsets k0 are
/// multiples of kGemmKBlock (256), hence of every GGUF block size (32).
class DensePanels final : public PanelSource {
 public:
  explicit DensePanels(const Part& p) : p_(p) {}
  void fill(int64_t r, int nr, int64_t k0, int64_t kn, float* buf) const override {
    const size_t col_bytes = dtype_row_bytes(p_.dtype, k0);
    for (int i = 0; i < nr; ++i)
      dequantize_row_fast(p_.dtype, p_.data + (r + i) * p_.row_bytes + col_bytes,
                          buf + i * kGemmKBlock, kn);
  }
  void prefetch(int64_t r, int nr, int64_t k0, int64_t kn) const override {
    const size_t col_bytes = dtype_row_bytes(p_.dtype, k0), n = dtype_row_bytes(p_.dtype, kn);
    for (int i = 0; i < nr; ++i) {
      const uint8_t* row = p_.data + (r + i) * p_.row_bytes + col_bytes;
      for (size_t b = 0; b < n; b += 64) __builtin_prefetch(row + b);
    }
  }

 private:
  const Part& p_;
};

/// A GGUF matrix of any block type (Q5_K, Q6_K) dequantized by the reference decoder and quantized
/// again to int8 per 32 (quantize_q8_0_block: d = max|w| / 127, q = round(w / d), d kept in fp16),
/// for the int8-activation kernels, which have no 5- or 6-bit form yet. Adds at most d/2 per
/// weight: about a quarter of Q6_K's own rounding error (measured 0.33 % of the weights' RMS vs
/// Q6_K's 1.33 % on random weights), and 8.5 bits per weight to stream instead of 6.6 (Q6_K) or 5.5
/// (Q5_K).
Int8Matrix int8_requantized(const TensorView& t) {
  check(t.shape.size() == 2 && t.shape[1] % 32 == 0,
        "tensor '" + t.name + "' has shape " + t.shape_str() + ", expected [out, in % 32 == 0]");
  Int8Matrix m;
  m.out = t.shape[0];
  m.in = t.shape[1];
  m.group_size = 32;
  m.q.resize((size_t)(m.out * m.in));
  m.scales.resize((size_t)(m.out * m.in / 32));
  const size_t rb = dtype_row_bytes(t.dtype, m.in);
  check(t.data != nullptr && t.nbytes >= rb * (size_t)m.out,
        "tensor '" + t.name + "' is truncated");
  std::vector<float> row((size_t)m.in);
  for (int64_t r = 0; r < m.out; ++r) {
    dequantize_row(t.dtype, static_cast<const uint8_t*>(t.data) + (size_t)r * rb, row.data(), m.in);
    for (int64_t b = 0; b < m.in / 32; ++b)
      m.scales[(size_t)(r * (m.in / 32) + b)] =
          quantize_q8_0_block(row.data() + 32 * b, m.q.data() + r * m.in + 32 * b);
  }
  return m;
}

/// One attention work item: tokens [t0, t0 + nt) of one sequence, one KV head.
struct AttnItem {
  int t0, nt, kvh;
  double cost;  // ~ query rows × keys
};

const CpuWeight& as_cpu(const Weight& w) {
  return static_cast<const CpuWeight&>(w);
}

class CpuBackend : public Backend {
 public:
  CpuBackend(int n_threads, bool act_quant) : pool_(n_threads), act_quant_(act_quant) {}
  std::string name() const override { return "cpu"; }
  DType act_dtype() const override { return DType::F32; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<CpuBuffer>(bytes);
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) override {
    check(!parts.empty(), "load_linear: no parts");
    if (act_quant_)
      if (auto w = load_quantized(parts)) return w;
    return load_in_place(parts);
  }

  /// Dense parts read in place (mmapped, stored dtype) and canonical int4 parts read as they are:
  /// the weights of the fp32-activation kernels (and every embedding table).
  std::unique_ptr<Weight> load_in_place(const std::vector<LinearSource>& parts,
                                        bool copy_dense = true) {
    auto w = std::make_unique<CpuWeight>();
    w->in = parts[0].in;
    int64_t row = 0;
    for (const auto& src : parts) {
      check(src.in == w->in, "fused linear parts have different input widths");
      Part p;
      p.row0 = row;
      p.rows = src.out;
      if (src.is_int4()) {
        const Int4Matrix& m = *src.int4;
        check(m.out == src.out && m.in == src.in && !m.has_mins() && m.group_size % 8 == 0 &&
                  m.in % m.group_size == 0,
              "load_linear: int4 part [" + std::to_string(m.out) + ", " + std::to_string(m.in) +
                  "] does not match [" + std::to_string(src.out) + ", " + std::to_string(src.in) +
                  "] or uses mins / a group size the CPU kernels do not support");
        p.w4 = src.int4;
      } else {
        const TensorView& t = src.weight;
        check(is_weight_dtype(t.dtype), "tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                                            ", not usable as a weight");
        check(t.shape.size() == 2 && t.shape[0] == src.out && t.shape[1] == src.in,
              "tensor '" + t.name + "' has shape " + t.shape_str() + ", expected [" +
                  std::to_string(src.out) + ", " + std::to_string(src.in) + "]");
        p.dtype = t.dtype;
        p.data = static_cast<const uint8_t*>(t.data);
        p.row_bytes = dtype_row_bytes(t.dtype, src.in);
        const size_t nb = p.row_bytes * (size_t)src.out;
        // A large dense weight (an fp16 lm_head: 17 % of TinyLlama AWQ's bytes per token) is
        // copied into huge-page memory, as the repacked weights are (decode median 63 -> 74 tok/s
        // in interleaved runs); its mmapped pages are released, so the resident size stays.
        if (copy_dense && nb >= (size_t(32) << 20)) {
          p.owned = alloc_weight_memory(nb);
          std::memcpy(p.owned.get(), p.data, nb);
          release_pages(p.data, nb);
          p.data = p.owned.get();
        } else {
          p.source_owner = src.owner;  // read in place: the loader's bytes must live on
        }
      }
      row += src.out;
      w->parts.push_back(std::move(p));
    }
    w->out = row;
    return w;
  }

  /// Int8-activation path: int4 parts (AWQ, GGUF Q4_0 / Q4_1 / Q4_K) and int8 parts (Q8_0; Q5_K
  /// and Q6_K requantized to int8 per 32, int8_requantized) repacked into QMatrix, consecutive
  /// parts of one kind into one (one stream for a fused QKV or gate|up). Null when a part does not
  /// qualify (dense float weights, int4 group sizes that are not multiples of 32): the caller then
  /// loads them all for the fp32-activation kernels.
  std::unique_ptr<Weight> load_quantized(const std::vector<LinearSource>& parts) {
#ifdef __GLIBC__
    // The loader frees each layer's decoded canonical matrices after we repacked them; glibc keeps
    // such freed tens of MB resident in its heap (its mmap threshold adapts upwards), which put a
    // Llama-2-7B AWQ load ~35 MB over the RSS budget. Hand them back before the next repack.
    malloc_trim(0);
#endif
    // Each part as a canonical int4 or int8 matrix (decoded GGUF blocks are held here).
    struct Canon {
      const Int4Matrix* i4 = nullptr;
      const Int8Matrix* i8 = nullptr;
    };
    std::vector<std::unique_ptr<Int4Matrix>> dec4;
    std::vector<std::unique_ptr<Int8Matrix>> dec8;
    std::vector<Canon> canon;
    for (const auto& src : parts) {
      Canon c;
      if (src.is_int4()) {
        if (!qmatrix_supports(*src.int4) || src.int4->out != src.out || src.int4->in != src.in)
          return nullptr;
        c.i4 = src.int4.get();
      } else if (int4_gguf_dtype(src.weight.dtype)) {
        dec4.push_back(std::make_unique<Int4Matrix>(int4_from_gguf(src.weight)));
        c.i4 = dec4.back().get();
      } else if (src.weight.dtype == DType::Q8_0) {
        dec8.push_back(std::make_unique<Int8Matrix>(int8_from_gguf(src.weight)));
        c.i8 = dec8.back().get();
      } else if (src.weight.dtype == DType::Q5_K || src.weight.dtype == DType::Q6_K) {
        dec8.push_back(std::make_unique<Int8Matrix>(int8_requantized(src.weight)));
        c.i8 = dec8.back().get();
      } else {
        return nullptr;
      }
      canon.push_back(c);
    }
    // Consecutive parts of one kind (int4 with the same group size and zero kind, or int8) share
    // one QMatrix; a fused linear of mixed kinds (Q4_K_M's Q4_K q/k with a Q6_K v) gets one per
    // run.
    auto same = [&](const Canon& a, const Canon& b) {
      if (a.i8 || b.i8) return a.i8 && b.i8;
      return a.i4->group_size == b.i4->group_size && a.i4->has_mins() == b.i4->has_mins();
    };
    auto w = std::make_unique<CpuWeight>();
    w->in = parts[0].in;
    int64_t row = 0;
    for (size_t i = 0; i < canon.size();) {
      size_t e = i + 1;
      while (e < canon.size() && same(canon[i], canon[e])) ++e;
      std::vector<const Int4Matrix*> i4;
      std::vector<const Int8Matrix*> i8;
      for (size_t k = i; k < e; ++k) {
        if (canon[k].i4) i4.push_back(canon[k].i4);
        if (canon[k].i8) i8.push_back(canon[k].i8);
      }
      Part p;
      p.row0 = row;
      p.qm = std::make_shared<const QMatrix>(i4.empty() ? qmatrix_from_int8(i8)
                                                        : qmatrix_from_int4(i4));
      p.rows = p.qm->out;
      row += p.rows;
      w->parts.push_back(std::move(p));
      i = e;
    }
    w->out = row;
    // The GGUF blocks were copied: let their mmapped pages leave the resident set.
    for (const auto& src : parts)
      if (!src.is_int4()) release_pages(src.weight.data, src.weight.nbytes);
    return w;
  }

  std::unique_ptr<Weight> load_vector(const TensorView& v) override {
    auto w = std::make_unique<CpuWeight>();
    w->out = v.numel();
    w->in = 1;
    w->vec.resize((size_t)w->out);
    float_to_f32(v.dtype, v.data, w->vec.data(), w->out, "tensor '" + v.name + "'");
    return w;
  }

  std::unique_ptr<Weight> load_embedding(const TensorView& table) override {
    check(table.shape.size() == 2, "embedding '" + table.name + "' is not 2-D");
    LinearSource s;
    s.weight = table;
    s.out = table.shape[0];
    s.in = table.shape[1];
    return load_in_place({s}, false);  // rows read by id: never repacked
  }

  std::unique_ptr<RopeTable> load_rope(const RopeParams& p) override {
    check(p.rot_dim >= 0 && p.rot_dim <= p.head_dim && p.rot_dim % 2 == 0 &&
              (int)p.inv_freq.size() == p.rot_dim / 2,
          "load_rope: inconsistent RoPE parameters");
    auto t = std::make_unique<RopeTable>();
    t->params = p;
    return t;
  }

  void check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const override {
    check_kv_shape(n_kv_heads, head_dim);
    for (DType t : {types.k.value_or(DType::F32), types.v.value_or(DType::F32)}) {
      check_kv_type(t == DType::F32 || t == DType::F16 || t == DType::Q8_0,
                    kv_type_unsupported(t) + " on the CPU (f32, f16, q8_0)");
      check_kv_q8_head_dim(t, head_dim);
    }
  }

  std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size, int n_kv_heads,
                                       int head_dim, const KvCacheTypes& types) override {
    check_kv_counts(n_layers, n_blocks, block_size);
    check_kv(n_kv_heads, head_dim, types);
    auto kv = std::make_unique<CpuKv>();
    kv->n_layers = n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->kdt = types.k.value_or(DType::F32);
    kv->vdt = types.v.value_or(DType::F32);
    const size_t slots = (size_t)n_blocks * block_size;
    kv->k_head = dtype_row_bytes(kv->kdt, head_dim);
    kv->v_head = dtype_row_bytes(kv->vdt, head_dim);
    kv->k_slot = kv->k_head * n_kv_heads;
    kv->v_slot = kv->v_head * n_kv_heads;
    kv->v_offset = (slots * kv->k_slot + 63) & ~size_t(63);
    kv->layer_bytes = (kv->v_offset + slots * kv->v_slot + 63) & ~size_t(63);
    kv->buf = std::make_unique<CpuBuffer>(kv->layer_bytes * n_layers);
    return kv;
  }

  void prepare_batch(const BatchLayout& b) override {
    for (int32_t p : b.positions) PERFX_CHECK(p >= 0, "prepare_batch: negative position");
    check_fed_rows(b, (int)fed_.size());
#ifdef __GLIBC__
    // Loading is over by the first step: return what the loader's freed decode buffers left in
    // glibc's heap (~25 MB of a Llama-2-7B AWQ load) before the resident set peaks.
    if (!trimmed_) malloc_trim(0);
#endif
    trimmed_ = true;
  }
  void synchronize() override {}

  void embedding(const Weight& table, const BatchLayout& b, Tensor out) override {
    const auto& w = as_cpu(table);
    const Part& p = w.parts[0];
    check(p.w4 == nullptr, "int4 embeddings are not supported");
    const int32_t* ids = b.token_ids.data();
    if (b.fed()) {
      fed_ids_.resize((size_t)b.n_tokens);
      for (int t = 0; t < b.n_tokens; ++t)
        fed_ids_[(size_t)t] = b.fed_rows[(size_t)t] >= 0 ? fed_[(size_t)b.fed_rows[(size_t)t]]
                                                         : b.token_ids[(size_t)t];
      ids = fed_ids_.data();
    }
    for (int t = 0; t < b.n_tokens; ++t) {
      const int32_t id = ids[t];
      PERFX_CHECK(id >= 0 && id < w.out, "token id " + std::to_string(id) +
                                             " is outside the vocabulary of " +
                                             std::to_string(w.out));
    }
    pool_.parallel_for(b.n_tokens, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        dequantize_row_fast(p.dtype, p.data + p.row_bytes * ids[t], out.f32() + t * out.stride,
                            w.in);
    });
  }

  void rms_norm(Tensor x, const Weight& w, float eps, Tensor out) override {
    const float* wv = as_cpu(w).vec.data();
    pool_.parallel_for(x.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        rms_norm_row(x.f32() + r * x.stride, wv, eps, x.cols, out.f32() + r * out.stride);
    });
  }

  void add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps, Tensor out) override {
    const float* wv = as_cpu(w).vec.data();
    pool_.parallel_for(x.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* res = residual.f32() + r * residual.stride;
        const float* xr = x.f32() + r * x.stride;
        for (int64_t i = 0; i < x.cols; ++i) res[i] += xr[i];
        rms_norm_row(res, wv, eps, x.cols, out.f32() + r * out.stride);
      }
    });
  }

  void linear(Tensor x, const Weight& wt, const Weight* bias, Tensor y) override {
    const auto& w = as_cpu(wt);
    PERFX_CHECK(x.cols == w.in && y.cols == w.out && x.rows == y.rows && x.dtype == DType::F32 &&
                    y.dtype == DType::F32,
                "linear: shape or dtype mismatch");
    PERFX_CHECK(!bias || bias->out == w.out, "linear: bias length mismatch");
    if (x.rows == 0) return;
    const int T = (int)x.rows;
    bool quantized = false;
    for (const Part& p : w.parts) quantized = quantized || p.qm != nullptr;
    if (quantized) {
      // Activations to int8 once per call: inline for a few tokens, else split over the threads.
      act_.resize(T, w.in);
      if (T <= 4)
        quantize_act(x.f32(), x.stride, 0, T, act_);
      else
        pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
          quantize_act(x.f32(), x.stride, (int)t0, (int)t1, act_);
        });
    }
    // One parallel loop over all output rows of all parts, in units of 16 rows (a QMatrix tile),
    // so a fused QKV or gate|up is a single fork/join and each thread streams one contiguous range.
    const int64_t units = (w.out + kQTileRows - 1) / kQTileRows;
    pool_.parallel_for(units, [&](int64_t u0, int64_t u1) {
      const int64_t r_begin = u0 * kQTileRows, r_end = std::min(w.out, u1 * kQTileRows);
      for (const Part& p : w.parts) {
        if (p.qm) {
          // The tiles whose first row lies in [r_begin, r_end).
          auto tile_at = [&](int64_t r) {
            return std::clamp<int64_t>((r - p.row0 + kQTileRows - 1) / kQTileRows, 0, p.qm->tiles);
          };
          qlinear(act_, *p.qm, tile_at(r_begin), r_end == w.out ? p.qm->tiles : tile_at(r_end),
                  y.f32() + p.row0, y.stride);
          continue;
        }
        const int64_t r0 = std::max(r_begin, p.row0), r1 = std::min(r_end, p.row0 + p.rows);
        if (r0 >= r1) continue;
        float* yp = y.f32() + p.row0;
        if (p.w4) {
          w4a16_linear(x.f32(), T, x.stride, *p.w4, r0 - p.row0, r1 - p.row0, yp, y.stride);
        } else {
          dense_rows(x, T, w.in, p, r0 - p.row0, r1 - p.row0, yp, y.stride);
        }
      }
    });
    if (bias) {
      const float* bv = as_cpu(*bias).vec.data();
      for (int t = 0; t < T; ++t)
        for (int64_t r = 0; r < w.out; ++r) y.f32()[t * y.stride + r] += bv[r];
    }
  }

  // Rows [r0, r1) of a dense part: y[t, r] = x[t] · W[r] for every token t. 1-4 tokens of 16-bit
  // rows: dot_16bit_rows (converted on the fly, two rows at a time); more tokens: the blocked GEMM
  // (gemm.h); one token of another dtype: a dot per row.
  static void dense_rows(const Tensor& x, int T, int64_t in, const Part& p, int64_t r0, int64_t r1,
                         float* yp, int64_t ldy) {
    // Up to 4 tokens of 16-bit rows: rows converted in registers, each used by every token.
    if (dot_16bit_rows(x.f32(), x.stride, T, p.data + r0 * p.row_bytes, p.row_bytes, p.dtype, in,
                       r1 - r0, yp + r0, ldy))
      return;
    if (T > 1) {
      gemm_nt(x.f32(), T, x.stride, in, DensePanels(p), r0, r1, yp, ldy);
      return;
    }
    thread_local std::vector<float> row;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = p.data + r * p.row_bytes;
      const float* wr;
      if (p.dtype == DType::F32 && ((uintptr_t)src % 4) == 0) {
        wr = reinterpret_cast<const float*>(src);
      } else {
        if ((int64_t)row.size() < in) row.resize((size_t)in);
        dequantize_row_fast(p.dtype, src, row.data(), in);
        wr = row.data();
      }
      yp[r] = dot(x.f32(), wr, in);
    }
  }

  void rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                     const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kvs,
                     int layer, const BatchLayout& b) override {
    auto& kv = static_cast<CpuKv&>(kvs);
    const RopeParams& rp = rope.params;
    const int hd = kv.head_dim, n_kv_heads = kv.n_kv_heads, half = rp.rot_dim / 2;
    PERFX_CHECK(q.dtype == DType::F32 && k.dtype == DType::F32 && v.dtype == DType::F32 &&
                    rp.head_dim == hd,
                "rope_kv_store: dtype or head_dim mismatch");
    const int64_t n_slots = (int64_t)kv.n_blocks * kv.block_size;
    for (int t = 0; t < b.n_tokens; ++t)
      PERFX_CHECK(b.slots[t] >= 0 && b.slots[t] < n_slots,
                  "KV slot " + std::to_string(b.slots[t]) + " out of range");
    const float* qn = q_norm ? as_cpu(*q_norm).vec.data() : nullptr;
    const float* kn = k_norm ? as_cpu(*k_norm).vec.data() : nullptr;
    const size_t width = (size_t)n_kv_heads * hd;
    pool_.parallel_for(b.n_tokens, [&](int64_t t0, int64_t t1) {
      std::vector<float> cs(half), sn(half);
      for (int64_t t = t0; t < t1; ++t) {
        const float pos = (float)b.positions[t];
        for (int i = 0; i < half; ++i) {
          const float ang = pos * rp.inv_freq[i];  // fp32 product, as HF computes freqs
          cs[i] = (float)std::cos((double)ang) * rp.attention_factor;
          sn[i] = (float)std::sin((double)ang) * rp.attention_factor;
        }
        for (int h = 0; h < n_q_heads; ++h) {
          float* x = q.f32() + t * q.stride + h * hd;
          if (qn) rms_norm_row(x, qn, eps, hd, x);
          rope_head(x, cs.data(), sn.data(), rp.rot_dim, rp.interleaved);
        }
        for (int h = 0; h < n_kv_heads; ++h) {
          float* x = k.f32() + t * k.stride + h * hd;
          if (kn) rms_norm_row(x, kn, eps, hd, x);
          rope_head(x, cs.data(), sn.data(), rp.rot_dim, rp.interleaved);
        }
        store_row(kv.kdt, k.f32() + t * k.stride, (int64_t)width, kv.k_raw(layer, b.slots[t]));
        store_row(kv.vdt, v.f32() + t * v.stride, (int64_t)width, kv.v_raw(layer, b.slots[t]));
      }
    });
  }

  void attention(Tensor q, const KvStorage& kvs, int layer, int n_q_heads, float scale,
                 const BatchLayout& b, Tensor out) override {
    const auto& kv = static_cast<const CpuKv&>(kvs);
    const int hd = kv.head_dim, group = n_q_heads / kv.n_kv_heads;
    // Work items: (tile of up to QB consecutive tokens of one sequence, KV head). QB makes a tile
    // of ~64 query rows (QB tokens × the GQA group), which then share every K/V block read.
    const int QB = std::clamp(64 / std::max(group, 1), 1, 16);
    using Item = AttnItem;
    std::vector<Item>& items = attn_items_;
    items.clear();
    for (int t = 0; t < b.n_tokens;) {
      int e = t + 1;
      while (e < b.n_tokens && e - t < QB && b.token_seq[e] == b.token_seq[t] &&
             b.positions[e] == b.positions[e - 1] + 1)
        ++e;
      for (int h = 0; h < kv.n_kv_heads; ++h)
        items.push_back({t, e - t, h, (double)(e - t) * (b.positions[e - 1] + 1) + 64.0});
      t = e;
    }
    // Contiguous ranges of equal cost, one per thread (a causal prompt's last tiles cost far
    // more than its first).
    const int nth = std::min<int>(pool_.size(), (int)items.size());
    std::vector<size_t> cut((size_t)nth + 1, items.size());
    cut[0] = 0;
    double total = 0;
    for (const Item& it : items) total += it.cost;
    double acc = 0;
    int k = 1;
    for (size_t i = 0; i < items.size() && k < nth; ++i) {
      acc += items[i].cost;
      if (acc >= total * k / nth) cut[(size_t)k++] = i + 1;
    }
    pool_.parallel_for(nth, [&](int64_t w0, int64_t w1) {
      for (int64_t w = w0; w < w1; ++w)
        for (size_t i = cut[(size_t)w]; i < cut[(size_t)w + 1]; ++i) {
          const Item& it = items[i];
          const PagedKv pk = kv.paged(
              layer, it.kvh, b.block_tables.data() + (size_t)b.token_seq[it.t0] * b.max_blocks);
          attention_tile(q.f32() + it.t0 * q.stride + it.kvh * group * hd, q.stride, it.nt,
                         b.positions.data() + it.t0, group, hd, scale, pk,
                         out.f32() + it.t0 * out.stride + it.kvh * group * hd, out.stride);
        }
    });
  }

  void silu_mul(Tensor gate_up, Tensor out) override {
    const int64_t I = out.cols;
    pool_.parallel_for(out.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* g = gate_up.f32() + r * gate_up.stride;
        silu_mul_row_fast(g, g + I, I, out.f32() + r * out.stride);
      }
    });
  }

  void gather_rows(Tensor x, const BatchLayout& b, Tensor out) override {
    for (size_t i = 0; i < b.logit_rows.size(); ++i)
      std::memcpy(out.f32() + i * out.stride, x.f32() + b.logit_rows[i] * x.stride,
                  x.cols * sizeof(float));
  }

  void sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) override {
    PERFX_CHECK(logits.dtype == DType::F32, "sample: logits must be F32");
    for (const auto& r : rows)
      PERFX_CHECK(r.row >= 0 && r.row < logits.rows, "sample: row out of range");
    pool_.parallel_for((int64_t)rows.size(), [&](int64_t r0, int64_t r1) {
      thread_local std::vector<std::pair<float, int32_t>> scratch;
      for (int64_t r = r0; r < r1; ++r)
        ids[r] = sample_logits(logits.f32() + rows[(size_t)r].row * logits.stride, (int)logits.cols,
                               rows[(size_t)r], scratch);
    });
  }

  // Overlapped decode: the draw happens at once; the ids wait in a queue for sample_end and feed
  // the next step's embedding (the engine's overlap path runs in CI on this backend).
  bool samples_ahead() const override {
    return true;
  }
  void sample_begin(Tensor logits, const std::vector<SampleRow>& rows) override {
    PERFX_CHECK(pending_.size() < 2, "sample_begin: two samples are already outstanding");
    for (const auto& r : rows)
      PERFX_CHECK(samples_ahead_row(r),
                  "sample_begin: a row with top-k / top-p / min-p or penalties (use sample)");
    std::vector<int32_t> ids(rows.size());
    sample(logits, rows, ids.data());
    fed_ = ids;
    pending_.push_back(std::move(ids));
  }
  void sample_end(int32_t* ids) override {
    PERFX_CHECK(!pending_.empty(), "sample_end: no sample_begin is outstanding");
    std::copy(pending_.front().begin(), pending_.front().end(), ids);
    pending_.pop_front();
  }

 private:
  ThreadPool pool_;
  std::deque<std::vector<int32_t>> pending_;  // sample_begin's ids, oldest first
  std::vector<int32_t> fed_;                  // the last sample_begin's ids
  std::vector<int32_t> fed_ids_;              // a fed step's token ids (embedding)
  const bool act_quant_;  // int8 activations for int4 / Q8_0 weights (PERFX_ACT_QUANT)
  QActivations act_;      // the current linear's quantized activations
  std::vector<AttnItem> attn_items_;
  bool trimmed_ = false;
};

}  // namespace

std::unique_ptr<Backend> create_cpu_backend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads, act_quant_enabled());
}

std::unique_ptr<Backend> create_cpu_backend(int n_threads, bool act_quant) {
  return std::make_unique<CpuBackend>(n_threads, act_quant);
}

}  // namespace perfx::cpu
