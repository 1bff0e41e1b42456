// "f16-ref": a test-only backend that keeps activations, scratch and the KV cache in IEEE fp16 and
// computes every op with the CPU reference kernels (backend/cpu/reference.h, attention_group_ref,
// sample_logits) in fp32 on converted copies. It lives outside src/backend and joins
// create_backend() through register_backend(), proving that a backend with another activation
// dtype needs no change to src/model or src/runtime (issue 14). Single-threaded and slow: for the
// conformance suite and the model parity tests only.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/reference.h"
#include "backend/cpu/sampling.h"
#include "perfx/status.h"

namespace perfx::test {
namespace {

class HostBuffer : public Buffer {
 public:
  explicit HostBuffer(size_t n) : mem_(n ? n : 1) {}
  void* data() override { return mem_.data(); }
  size_t size() const override { return mem_.size(); }

 private:
  std::vector<unsigned char> mem_;
};

/// Weights are kept dequantized to fp32 [out, in] (dense, GGUF blocks and int4 alike).
class RefWeight : public Weight {
 public:
  std::vector<float> w;
  size_t bytes() const override { return w.size() * sizeof(float); }
};

class RefKv : public KvStorage {
 public:
  std::vector<uint16_t> k, v;  // [layers, slots, n_kv_heads * head_dim] fp16
  size_t bytes() const override { return (k.size() + v.size()) * 2; }
  size_t at(int layer, int64_t slot) const {
    return ((size_t)layer * n_blocks * block_size + (size_t)slot) * n_kv_heads * head_dim;
  }
};

const std::vector<float>& vec(const Weight& w) {
  return static_cast<const RefWeight&>(w).w;
}

/// Row r of an F16 (or F32, for logits) tensor as fp32.
std::vector<float> get_row(const Tensor& t, int64_t r) {
  std::vector<float> out((size_t)t.cols);
  const char* p =
      static_cast<const char*>(t.data) + (size_t)(r * t.stride) * dtype_block_bytes(t.dtype);
  float_to_f32(t.dtype, p, out.data(), t.cols, "f16-ref tensor");
  return out;
}

void put_row(const Tensor& t, int64_t r, const float* x) {
  char* p = static_cast<char*>(t.data) + (size_t)(r * t.stride) * dtype_block_bytes(t.dtype);
  if (t.dtype == DType::F32) {
    std::memcpy(p, x, (size_t)t.cols * 4);
    return;
  }
  check(t.dtype == DType::F16, "f16-ref: tensors must be F16 (or F32 logits)");
  uint16_t* h = reinterpret_cast<uint16_t*>(p);
  for (int64_t i = 0; i < t.cols; ++i) h[i] = fp32_to_fp16(x[i]);
}

/// fp32 round trip through fp16 (what storing an activation does).
float round16(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

class F16RefBackend : public Backend {
 public:
  std::string name() const override { return "f16-ref"; }
  DType act_dtype() const override { return DType::F16; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<HostBuffer>(bytes);
  }
  void to_device(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void synchronize() override {}

  std::unique_ptr<Weight> load_linear(const std::vector<LinearSource>& parts) override {
    check(!parts.empty(), "load_linear: no parts");
    auto w = std::make_unique<RefWeight>();
    w->in = parts[0].in;
    for (const auto& p : parts) {
      check(p.in == w->in, "fused linear parts have different input widths");
      const size_t r0 = w->w.size();
      w->w.resize(r0 + (size_t)(p.out * p.in));
      float* dst = w->w.data() + r0;
      if (p.is_int4()) {
        for (int64_t r = 0; r < p.out; ++r)
          for (int64_t k = 0; k < p.in; ++k) dst[r * p.in + k] = p.int4->dequant(r, k);
      } else {
        check(is_weight_dtype(p.weight.dtype),
              "tensor '" + p.weight.name + "' is not usable as a weight");
        const size_t rb = dtype_row_bytes(p.weight.dtype, p.in);
        for (int64_t r = 0; r < p.out; ++r)
          cpu::dequantize_row(p.weight.dtype, static_cast<const char*>(p.weight.data) + r * rb,
                              dst + r * p.in, p.in);
      }
      w->out += p.out;
    }
    return w;
  }
  std::unique_ptr<Weight> load_vector(const TensorView& v) override {
    auto w = std::make_unique<RefWeight>();
    w->out = v.numel();
    w->in = 1;
    w->w.resize((size_t)w->out);
    float_to_f32(v.dtype, v.data, w->w.data(), w->out, "tensor '" + v.name + "'");
    return w;
  }
  std::unique_ptr<Weight> load_embedding(const TensorView& t) override {
    LinearSource s;
    s.weight = t;
    s.out = t.shape.at(0);
    s.in = t.shape.at(1);
    return load_linear({s});
  }
  std::unique_ptr<RopeTable> load_rope(const RopeParams& p) override {
    auto t = std::make_unique<RopeTable>();
    t->params = p;
    return t;
  }
  void check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const override {
    check_kv_shape(n_kv_heads, head_dim);
    for (const auto& t : {types.k, types.v})
      check_kv_type(!t || *t == DType::F16, "f16-ref keeps the KV cache in F16; " +
                                                kv_type_unsupported(t.value_or(DType::F16)) +
                                                " on it");
  }
  std::unique_ptr<KvStorage> create_kv(int n_layers, int n_blocks, int block_size, int n_kv_heads,
                                       int head_dim, const KvCacheTypes& types) override {
    check_kv_counts(n_layers, n_blocks, block_size);
    check_kv(n_kv_heads, head_dim, types);
    auto kv = std::make_unique<RefKv>();
    kv->n_layers = n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    const size_t n = (size_t)n_layers * n_blocks * block_size * n_kv_heads * head_dim;
    kv->k.assign(n, 0x7e00);  // NaN: a slot read before it is written shows up
    kv->v.assign(n, 0x7e00);
    return kv;
  }

  void prepare_batch(const BatchLayout& b) override {
    for (int32_t p : b.positions) check(p >= 0, "prepare_batch: negative position");
  }

  void embedding(const Weight& table, const BatchLayout& b, Tensor out) override {
    const auto& w = vec(table);
    for (int t = 0; t < b.n_tokens; ++t) {
      const int32_t id = b.token_ids[t];
      check(id >= 0 && id < table.out,
            "token id " + std::to_string(id) + " is outside the vocabulary");
      put_row(out, t, w.data() + (size_t)id * table.in);
    }
  }
  void rms_norm(Tensor x, const Weight& w, float eps, Tensor out) override {
    std::vector<float> o((size_t)x.cols);
    for (int64_t r = 0; r < x.rows; ++r) {
      const auto xr = get_row(x, r);
      cpu::rms_norm_row(xr.data(), vec(w).data(), eps, x.cols, o.data());
      put_row(out, r, o.data());
    }
  }
  void add_rms_norm(Tensor res, Tensor x, const Weight& w, float eps, Tensor out) override {
    std::vector<float> o((size_t)x.cols);
    for (int64_t r = 0; r < x.rows; ++r) {
      auto rr = get_row(res, r);
      const auto xr = get_row(x, r);
      for (int64_t i = 0; i < x.cols; ++i) rr[(size_t)i] = round16(rr[(size_t)i] + xr[(size_t)i]);
      put_row(res, r, rr.data());
      cpu::rms_norm_row(rr.data(), vec(w).data(), eps, x.cols, o.data());
      put_row(out, r, o.data());
    }
  }
  void linear(Tensor x, const Weight& w, const Weight* bias, Tensor y) override {
    check(x.cols == w.in && y.cols == w.out && x.rows == y.rows, "linear: shape mismatch");
    check(!bias || bias->out == w.out, "linear: bias length mismatch");
    std::vector<float> o((size_t)w.out);
    for (int64_t t = 0; t < x.rows; ++t) {
      const auto xr = get_row(x, t);
      for (int64_t r = 0; r < w.out; ++r)
        o[(size_t)r] = cpu::dot_ref(xr.data(), vec(w).data() + r * w.in, w.in) +
                       (bias ? vec(*bias)[(size_t)r] : 0.0f);
      put_row(y, t, o.data());
    }
  }
  void rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                     const Weight* k_norm, float eps, const RopeTable& rope, KvStorage& kvs,
                     int layer, const BatchLayout& b) override {
    auto& kv = static_cast<RefKv&>(kvs);
    const RopeParams& rp = rope.params;
    const int hd = kv.head_dim, half = rp.rot_dim / 2;
    std::vector<float> cs((size_t)half), sn((size_t)half);
    for (int t = 0; t < b.n_tokens; ++t) {
      check(b.slots[t] >= 0 && b.slots[t] < kv.n_blocks * kv.block_size, "KV slot out of range");
      for (int i = 0; i < half; ++i) {
        const float ang = (float)b.positions[t] * rp.inv_freq[(size_t)i];
        cs[(size_t)i] = (float)std::cos((double)ang) * rp.attention_factor;
        sn[(size_t)i] = (float)std::sin((double)ang) * rp.attention_factor;
      }
      auto qr = get_row(q, t), kr = get_row(k, t);
      const auto vr = get_row(v, t);
      for (int h = 0; h < n_q_heads; ++h) {
        float* x = qr.data() + h * hd;
        if (q_norm) cpu::rms_norm_row(x, vec(*q_norm).data(), eps, hd, x);
        cpu::rope_head(x, cs.data(), sn.data(), rp.rot_dim, rp.interleaved);
      }
      for (int h = 0; h < kv.n_kv_heads; ++h) {
        float* x = kr.data() + h * hd;
        if (k_norm) cpu::rms_norm_row(x, vec(*k_norm).data(), eps, hd, x);
        cpu::rope_head(x, cs.data(), sn.data(), rp.rot_dim, rp.interleaved);
      }
      put_row(q, t, qr.data());
      put_row(k, t, kr.data());
      const size_t at = kv.at(layer, b.slots[t]);
      for (int64_t i = 0; i < k.cols; ++i) {
        kv.k[at + (size_t)i] = fp32_to_fp16(kr[(size_t)i]);
        kv.v[at + (size_t)i] = fp32_to_fp16(vr[(size_t)i]);
      }
    }
  }
  void attention(Tensor q, const KvStorage& kvs, int layer, int n_q_heads, float scale,
                 const BatchLayout& b, Tensor out) override {
    const auto& kv = static_cast<const RefKv&>(kvs);
    const int hd = kv.head_dim, group = n_q_heads / kv.n_kv_heads;
    const int64_t n_slots = (int64_t)kv.n_blocks * kv.block_size,
                  width = (int64_t)kv.n_kv_heads * hd;
    // The layer's pools widened to fp32 (slow and simple).
    std::vector<float> kf((size_t)(n_slots * width)), vf((size_t)(n_slots * width));
    const size_t at = kv.at(layer, 0);
    for (size_t i = 0; i < kf.size(); ++i) {
      kf[i] = fp16_to_fp32(kv.k[at + i]);
      vf[i] = fp16_to_fp32(kv.v[at + i]);
    }
    std::vector<float> o((size_t)(n_q_heads * hd));
    for (int t = 0; t < b.n_tokens; ++t) {
      const auto qr = get_row(q, t);
      const int n_keys = b.positions[t] + 1;
      std::vector<float> scores((size_t)group * n_keys);
      for (int g = 0; g < kv.n_kv_heads; ++g) {
        cpu::PagedKv pk;
        pk.k_base = kf.data() + g * hd;
        pk.v_base = vf.data() + g * hd;
        pk.slot_stride = width;
        pk.table = b.block_tables.data() + (size_t)b.token_seq[t] * b.max_blocks;
        pk.block_size = kv.block_size;
        cpu::attention_group_ref(qr.data() + g * group * hd, group, hd, scale, n_keys, pk,
                                 scores.data(), o.data() + g * group * hd);
      }
      put_row(out, t, o.data());
    }
  }
  void silu_mul(Tensor gu, Tensor out) override {
    std::vector<float> o((size_t)out.cols);
    for (int64_t r = 0; r < out.rows; ++r) {
      const auto g = get_row(gu, r);
      cpu::silu_mul_row(g.data(), g.data() + out.cols, out.cols, o.data());
      put_row(out, r, o.data());
    }
  }
  void gather_rows(Tensor x, const BatchLayout& b, Tensor out) override {
    for (size_t i = 0; i < b.logit_rows.size(); ++i) {
      const auto r = get_row(x, b.logit_rows[i]);
      put_row(out, (int64_t)i, r.data());
    }
  }
  void sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) override {
    check(logits.dtype == DType::F32, "sample: logits must be F32");
    std::vector<std::pair<float, int32_t>> scratch;
    for (size_t r = 0; r < rows.size(); ++r)
      ids[r] = cpu::sample_logits(logits.f32() + (int64_t)rows[r].row * logits.stride,
                                  (int)logits.cols, rows[r], scratch);
  }
};

/// Registered when the test binary starts (this file is linked into it directly).
const bool kRegistered = [] {
  register_backend("f16-ref", [](int, int) { return std::make_unique<F16RefBackend>(); });
  return true;
}();

}  // namespace
}  // namespace perfx::test
