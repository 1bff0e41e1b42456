#include "model/synthetic.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "perfx/status.h"

namespace perfx {
namespace {

struct Shape {
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, max_pos;
};

const std::map<std::string, Shape>& shapes() {
  static const std::map<std::string, Shape> s = {
      {"tinyllama-1.1b", {32000, 2048, 5632, 22, 32, 4, 2048}},
      {"llama-2-7b", {32000, 4096, 11008, 32, 32, 32, 4096}},
      {"llama-2-70b", {32000, 8192, 28672, 80, 64, 8, 4096}},
      {"mistral-7b", {32000, 4096, 14336, 32, 32, 8, 32768}},
  };
  return s;
}

/// Tensors owning their bytes.
class MemorySource : public TensorSource {
 public:
  const TensorView* find(const std::string& name) const override {
    auto it = views_.find(name);
    return it == views_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> n;
    for (const auto& [k, v] : views_) n.push_back(k);
    return n;
  }
  /// A tensor of `nbytes` bytes filled from `pool` (tiled), returned for in-place fixes.
  unsigned char* add(const std::string& name, DType dt, std::vector<int64_t> shape, size_t nbytes,
                     const std::vector<unsigned char>& pool) {
    auto buf = std::make_unique<unsigned char[]>(nbytes);
    for (size_t at = 0; at < nbytes; at += pool.size())
      std::memcpy(buf.get() + at, pool.data(), std::min(pool.size(), nbytes - at));
    TensorView v{name, dt, std::move(shape), buf.get(), nbytes};
    unsigned char* p = buf.get();
    mem_.push_back(std::move(buf));
    views_[name] = std::move(v);
    return p;
  }

 private:
  std::map<std::string, TensorView> views_;
  std::vector<std::unique_ptr<unsigned char[]>> mem_;
};

struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  float sym(float a) { return ((float)(next() >> 40) / 16777216.0f * 2.0f - 1.0f) * a; }
};

constexpr size_t kPool = size_t(16) << 20;

/// A pool of fp16 values uniform in [-amp, amp].
std::vector<unsigned char> f16_pool(float amp, Rng& rng) {
  std::vector<unsigned char> p(kPool);
  for (size_t i = 0; i < kPool; i += 2) {
    const uint16_t h = fp32_to_fp16(rng.sym(amp));
    std::memcpy(p.data() + i, &h, 2);
  }
  return p;
}

/// A pool of GGUF blocks of `dt` (whole blocks) with fp16 scale d (and min for Q4_1).
std::vector<unsigned char> block_pool(DType dt, float d, Rng& rng) {
  const size_t bb = dtype_block_bytes(dt), n = kPool / bb;
  std::vector<unsigned char> p(n * bb);
  for (auto& b : p) b = (unsigned char)rng.next();
  const uint16_t dh = fp32_to_fp16(d);
  for (size_t i = 0; i < n; ++i) std::memcpy(p.data() + i * bb, &dh, 2);
  return p;
}

}  // namespace

bool is_synthetic_path(const std::string& path) {
  return path.rfind("random:", 0) == 0;
}

Checkpoint synthetic_checkpoint(const std::string& path) {
  check(is_synthetic_path(path), "not a synthetic model path: '" + path + "'");
  std::string rest = path.substr(7), fmt = "awq";
  if (const size_t c = rest.find(':'); c != std::string::npos) {
    fmt = rest.substr(c + 1);
    rest = rest.substr(0, c);
  }
  std::string known;
  for (const auto& [k, v] : shapes()) known += (known.empty() ? "" : ", ") + k;
  const auto it = shapes().find(rest);
  check(it != shapes().end(),
        "unknown synthetic model shape '" + rest + "' in '" + path + "' (known: " + known + ")");
  check(fmt == "awq" || fmt == "f16" || fmt == "q8_0" || fmt == "q4_0",
        "unknown synthetic weight format '" + fmt + "' in '" + path +
            "' (known: awq, f16, q8_0, q4_0)");
  const Shape s = it->second;
  Checkpoint ck;
  ck.path = path;
  ck.naming = TensorNaming::HuggingFace;
  ModelConfig& c = ck.config;
  c.model_type = "llama";
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.max_position_embeddings = s.max_pos;
  c.rms_norm_eps = 1e-5f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (fmt == "awq") {
    c.quant.enabled = true;
    c.quant.version = "gemv";
    c.quant.group_size = 128;
  }
  auto src = std::make_unique<MemorySource>();
  Rng rng;
  const auto embed_pool = f16_pool(0.05f, rng);
  src->add("model.embed_tokens.weight", DType::F16, {s.vocab, s.hidden},
           (size_t)(s.vocab * s.hidden) * 2, embed_pool);
  src->add("lm_head.weight", DType::F16, {s.vocab, s.hidden}, (size_t)(s.vocab * s.hidden) * 2,
           embed_pool);
  std::vector<unsigned char> ones(kPool);
  for (size_t i = 0; i < kPool; i += 2) {
    const uint16_t h = fp32_to_fp16(1.0f);
    std::memcpy(ones.data() + i, &h, 2);
  }
  src->add("model.norm.weight", DType::F16, {s.hidden}, (size_t)s.hidden * 2, ones);
  // Weight pools per format, scaled so |W·x| stays near |x| (std ≈ 1 / sqrt(in) per output).
  std::map<int64_t, std::vector<unsigned char>> dense, blocks, scales;
  std::vector<unsigned char> nibbles(kPool), zeros(kPool);
  for (auto& b : nibbles) b = (unsigned char)rng.next();
  for (size_t i = 0; i < kPool; i += 4) {
    const uint32_t z = 0x88888888u;
    std::memcpy(zeros.data() + i, &z, 4);
  }
  const int64_t hd = c.head_dim, kvd = s.kv_heads * hd;
  auto linear = [&](const std::string& base, int64_t out, int64_t in) {
    const float amp = 1.0f / std::sqrt((float)in);
    if (fmt == "f16") {
      if (!dense.count(in)) dense[in] = f16_pool(amp * 1.7f, rng);
      src->add(base + ".weight", DType::F16, {out, in}, (size_t)(out * in) * 2, dense[in]);
    } else if (fmt == "q8_0" || fmt == "q4_0") {
      const DType dt = fmt == "q8_0" ? DType::Q8_0 : DType::Q4_0;
      if (!blocks.count(in))
        blocks[in] = block_pool(dt, dt == DType::Q8_0 ? amp * 1.7f / 127 : amp * 1.7f / 8, rng);
      src->add(base + ".weight", dt, {out, in}, (size_t)out * dtype_row_bytes(dt, in), blocks[in]);
    } else {  // AutoAWQ GEMV: qweight [out, in/8] (canonical nibble order), qzeros [out, ZW],
              // scales [out, ZW*8]
      const int64_t G = in / 128, ZW = (G + 7) / 8;
      if (!scales.count(in)) {
        std::vector<unsigned char> p(kPool);
        for (size_t i = 0; i < kPool; i += 2) {
          const uint16_t h = fp32_to_fp16(amp * 1.7f / 8 * (1.0f + 0.25f * rng.sym(1.0f)));
          std::memcpy(p.data() + i, &h, 2);
        }
        scales[in] = std::move(p);
      }
      src->add(base + ".qweight", DType::I32, {out, in / 8}, (size_t)(out * in / 8) * 4, nibbles);
      src->add(base + ".qzeros", DType::I32, {out, ZW}, (size_t)(out * ZW) * 4, zeros);
      src->add(base + ".scales", DType::F16, {out, ZW * 8}, (size_t)(out * ZW * 8) * 2, scales[in]);
    }
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    src->add(p + "input_layernorm.weight", DType::F16, {s.hidden}, (size_t)s.hidden * 2, ones);
    src->add(p + "post_attention_layernorm.weight", DType::F16, {s.hidden}, (size_t)s.hidden * 2,
             ones);
    linear(p + "self_attn.q_proj", s.hidden, s.hidden);
    linear(p + "self_attn.k_proj", kvd, s.hidden);
    linear(p + "self_attn.v_proj", kvd, s.hidden);
    linear(p + "self_attn.o_proj", s.hidden, s.hidden);
    linear(p + "mlp.gate_proj", s.intermediate, s.hidden);
    linear(p + "mlp.up_proj", s.intermediate, s.hidden);
    linear(p + "mlp.down_proj", s.hidden, s.intermediate);
  }
  ck.source = std::move(src);
  return ck;
}

}  // namespace perfx
