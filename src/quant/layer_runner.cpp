// One decoder layer of the fp model run through LlamaModel::forward for AWQ calibration.
#include "quant/layer_runner.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "model/llama.h"
#include "model/weights.h"
#include "perfx/status.h"

namespace perfx::quant {
namespace {

constexpr int kKvBlock = 16;
constexpr int64_t kTokensPerForward = 512;  // bounds the model's scratch memory

/// Tensors served from host memory (names as in a HF checkpoint).
class MemorySource : public TensorSource {
 public:
  void add(const std::string& name, const float* data, std::vector<int64_t> shape) {
    TensorView v;
    v.name = name;
    v.dtype = DType::F32;
    v.shape = std::move(shape);
    v.data = data;
    v.nbytes = static_cast<size_t>(v.numel()) * sizeof(float);
    map_[name] = v;
  }
  void add_linear(const std::string& base, const LinearF32& L) {
    add(base + ".weight", L.w.data(), {L.out, L.in});
    if (!L.bias.empty()) add(base + ".bias", L.bias.data(), {L.out});
  }
  const TensorView* find(const std::string& name) const override {
    auto it = map_.find(name);
    return it == map_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> n;
    for (const auto& kv : map_) n.push_back(kv.first);
    return n;
  }

 private:
  std::map<std::string, TensorView> map_;
};

struct StopForward {};

void copy_rows(const Tensor& t, Matrix& m, int64_t row0) {
  check(t.cols == m.cols, "layer runner: captured width mismatch");
  for (int64_t r = 0; r < t.rows; ++r)
    std::memcpy(m.row(row0 + r), t.f32() + r * t.stride, static_cast<size_t>(t.cols) * 4);
}

}  // namespace

ModelLayerRunner::ModelLayerRunner(const ModelConfig& cfg, Backend& backend, int n_blocks,
                                   int seq_len, ThreadPool* pool)
    : cfg_(cfg), be_(backend), n_blocks_(n_blocks), seq_len_(seq_len), pool_(pool) {
  check(!cfg.rope_interleaved, "layer runner: expects HF (half-split) RoPE layout");
  blocks_per_chunk_ = static_cast<int>(std::max<int64_t>(1, kTokensPerForward / seq_len));
  blocks_per_chunk_ = std::min(blocks_per_chunk_, n_blocks_);
  const int per_seq = (seq_len + kKvBlock - 1) / kKvBlock;
  kv_ = be_.create_kv(1, per_seq * blocks_per_chunk_, kKvBlock,
                      static_cast<int>(cfg.num_key_value_heads), static_cast<int>(cfg.head_dim));
  ones_.assign(static_cast<size_t>(cfg.hidden_size), 1.0f);
}

ModelLayerRunner::~ModelLayerRunner() = default;

void ModelLayerRunner::set_input(const Matrix* x) {
  check(x && x->rows == static_cast<int64_t>(n_blocks_) * seq_len_ && x->cols == cfg_.hidden_size,
        "layer runner: input must be [n_blocks * seq_len, hidden]");
  x_ = x;
}

void ModelLayerRunner::run(
    const DecoderLayerF32& L, const LinearF32& q, const LinearF32& k, const LinearF32& v,
    const LinearF32& gate, const LinearF32& up, Stop stop,
    const std::function<void(const std::string&, int64_t, const Tensor&)>& sink) {
  check(x_ != nullptr, "layer runner: no input set");
  const int64_t N = x_->rows, H = cfg_.hidden_size;
  ModelConfig c = cfg_;
  c.num_hidden_layers = 1;
  c.vocab_size = N;
  c.tie_word_embeddings = true;
  c.quant = QuantConfig{};
  auto src = std::make_unique<MemorySource>();
  src->add("model.embed_tokens.weight", x_->data.data(), {N, H});
  src->add("model.norm.weight", ones_.data(), {H});
  const std::string p = "model.layers.0.";
  src->add(p + "input_layernorm.weight", L.attn_norm.data(), {H});
  src->add(p + "post_attention_layernorm.weight", L.ffn_norm.data(), {H});
  if (!L.q_norm.empty()) {
    src->add(p + "self_attn.q_norm.weight", L.q_norm.data(),
             {static_cast<int64_t>(L.q_norm.size())});
    src->add(p + "self_attn.k_norm.weight", L.k_norm.data(),
             {static_cast<int64_t>(L.k_norm.size())});
  }
  src->add_linear(p + "self_attn.q_proj", q);
  src->add_linear(p + "self_attn.k_proj", k);
  src->add_linear(p + "self_attn.v_proj", v);
  src->add_linear(p + "self_attn.o_proj", L.o);
  src->add_linear(p + "mlp.gate_proj", gate);
  src->add_linear(p + "mlp.up_proj", up);
  src->add_linear(p + "mlp.down_proj", L.down);
  Checkpoint ck;
  ck.source = std::move(src);
  ck.naming = TensorNaming::HuggingFace;
  ck.config = c;
  ck.path = "<AWQ calibration layer>";
  LlamaModel model(ck, be_);

  const int per_seq = (seq_len_ + kKvBlock - 1) / kKvBlock;
  for (int b0 = 0; b0 < n_blocks_; b0 += blocks_per_chunk_) {
    const int nb = std::min(blocks_per_chunk_, n_blocks_ - b0);
    const int64_t row0 = static_cast<int64_t>(b0) * seq_len_;
    BatchLayout b;
    b.n_tokens = nb * seq_len_;
    b.n_seqs = nb;
    b.max_blocks = per_seq;
    for (int s = 0; s < nb; ++s) {
      for (int j = 0; j < per_seq; ++j) b.block_tables.push_back(s * per_seq + j);
      for (int t = 0; t < seq_len_; ++t) {
        b.token_ids.push_back(static_cast<int32_t>(row0 + static_cast<int64_t>(s) * seq_len_ + t));
        b.positions.push_back(t);
        b.token_seq.push_back(s);
        b.slots.push_back((s * per_seq + t / kKvBlock) * kKvBlock + t % kKvBlock);
      }
    }
    model.observer = [&](int, const std::string& name, const Tensor& x) {
      sink(name, row0, x);
      if ((stop == Stop::AfterAttention && name == "o") ||
          (stop == Stop::AfterMlp && name == "down"))
        throw StopForward{};
    };
    std::vector<float> logits;
    try {
      model.forward(b, *kv_, logits);
    } catch (const StopForward&) {
    }
  }
}

void ModelLayerRunner::capture(const DecoderLayerF32& L, LayerInputs& X, Matrix& x_next) {
  const int64_t N = x_->rows;
  X.attn = Matrix(N, cfg_.hidden_size);
  X.o = Matrix(N, L.o.in);
  X.mlp = Matrix(N, cfg_.hidden_size);
  X.down = Matrix(N, L.down.in);
  run(L, L.q, L.k, L.v, L.gate, L.up, Stop::Never,
      [&](const std::string& name, int64_t row0, const Tensor& t) {
        if (name == "qkv") copy_rows(t, X.attn, row0);
        if (name == "o") copy_rows(t, X.o, row0);
        if (name == "gate_up") copy_rows(t, X.mlp, row0);
        if (name == "down") copy_rows(t, X.down, row0);
      });
  // The layer's output as the model computes it: x + o_proj(attn) + down_proj(act).
  Matrix o, d;
  matmul_wt(X.o, L.o, o, pool_);
  matmul_wt(X.down, L.down, d, pool_);
  x_next = *x_;
  for (size_t i = 0; i < x_next.data.size(); ++i) x_next.data[i] += o.data[i] + d.data[i];
}

void ModelLayerRunner::attention(const DecoderLayerF32& L, const LinearF32& q, const LinearF32& k,
                                 const LinearF32& v, Matrix& out) {
  Matrix a(x_->rows, L.o.in);
  run(L, q, k, v, L.gate, L.up, Stop::AfterAttention,
      [&](const std::string& name, int64_t row0, const Tensor& t) {
        if (name == "o") copy_rows(t, a, row0);
      });
  matmul_wt(a, L.o, out, pool_);
}

void ModelLayerRunner::mlp(const DecoderLayerF32& L, const LinearF32& gate, const LinearF32& up,
                           Matrix& out) {
  Matrix act(x_->rows, L.down.in);
  run(L, L.q, L.k, L.v, gate, up, Stop::AfterMlp,
      [&](const std::string& name, int64_t row0, const Tensor& t) {
        if (name == "down") copy_rows(t, act, row0);
      });
  matmul_wt(act, L.down, out, pool_);
}

}  // namespace perfx::quant
