#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quantized.h"
#include "model/rope.h"
#include "perfx/status.h"

namespace perfx {

namespace {

// A 1-D f32 tensor built on the host (concatenated biases).
struct HostVector {
  std::vector<float> data;
  TensorView view(const std::string& name) const {
    TensorView v;
    v.name = name;
    v.dtype = DType::F32;
    v.shape = {(int64_t)data.size()};
    v.data = data.data();
    v.nbytes = data.size() * 4;
    return v;
  }
};

void append_vector(HostVector& hv, const TensorView& t) {
  const size_t n0 = hv.data.size();
  hv.data.resize(n0 + (size_t)t.numel());
  float_to_f32(t.dtype, t.data, hv.data.data() + n0, t.numel(), "tensor '" + t.name + "'");
}

/// Bytes of a rows × cols tensor of `dt` rounded up to 256 (each scratch tensor starts aligned).
size_t tensor_bytes(DType dt, int64_t rows, int64_t cols) {
  return ((size_t)(rows * cols) * dtype_block_bytes(dt) + 255) & ~size_t(255);
}

Tensor make_tensor(void* base, size_t& off, DType dt, int64_t rows, int64_t cols) {
  Tensor t;
  t.data = static_cast<char*>(base) + off;
  t.dtype = dt;
  t.rows = rows;
  t.cols = cols;
  t.stride = cols;
  off += tensor_bytes(dt, rows, cols);
  return t;
}

}  // namespace

LlamaModel::LlamaModel(const Checkpoint& ck, Backend& backend, const ModelOptions& opts)
    : cfg_(ck.config), be_(backend), act_(backend.act_dtype()) {
  const TensorNaming nm = ck.naming;
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
  const int64_t qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), hd = cfg_.head_dim;

  check_layer_count(ck);  // before anything is loaded or allocated for the layers
  const TensorView& emb = require_tensor(ck, embed_name(nm));
  check(emb.shape.size() == 2 && emb.shape[0] == V && emb.shape[1] == H,
        "tensor '" + emb.name + "' has shape " + emb.shape_str() + ", expected [" + std::to_string(V) +
            ", " + std::to_string(H) + "]");
  embed_ = be_.load_embedding(emb);
  final_norm_ = be_.load_vector(require_vector(ck, final_norm_name(nm), H));
  const TensorView* head = find_tensor(ck, lm_head_name(nm));  // an unsupported type: an error
  if (head) {
    check(head->shape.size() == 2 && head->shape[0] == V && head->shape[1] == H,
          "tensor '" + head->name + "' has shape " + head->shape_str() + ", expected [" +
              std::to_string(V) + ", " + std::to_string(H) + "]");
  } else {
    check(cfg_.tie_word_embeddings || nm == TensorNaming::Gguf,
          "missing tensor '" + lm_head_name(nm) + "' in " + ck.path + " (and tie_word_embeddings is false)");
    head = &emb;
    lm_head_is_embed_ = true;
  }
  LinearSource s;
  s.weight = *head;
  s.out = V;
  s.in = H;
  const bool is_float =
      head->dtype == DType::F32 || head->dtype == DType::F16 || head->dtype == DType::BF16;
  if (opts.lm_head_type && is_float) {
    check(H % 32 == 0, std::string("--lm-head-type ") + (*opts.lm_head_type == DType::Q8_0 ? "q8_0" : "q4_0") +
                           " quantizes in blocks of 32 along the hidden size; this model's is " + std::to_string(H));
    auto blocks = std::make_shared<std::vector<uint8_t>>(gguf_blocks_from_float(*head, *opts.lm_head_type));
    s.weight = TensorView{head->name + " (" + dtype_name(*opts.lm_head_type) + " at load)", *opts.lm_head_type,
                          {V, H}, blocks->data(), blocks->size()};
    s.owner = blocks;  // freed after the load unless the backend reads them in place
    lm_head_is_embed_ = false;  // its own bytes now
  }
  lm_head_ = be_.load_linear({s});
  if (nm == TensorNaming::Gguf) {
    if (const TensorView* rf = find_tensor(ck, "rope_freqs.weight")) {
      HostVector hv;
      append_vector(hv, *rf);
      check((int64_t)hv.data.size() == hd / 2, "rope_freqs.weight has " + std::to_string(hv.data.size()) +
                                                   " entries, expected head_dim/2");
      rope_freq_factors_ = hv.data;
    }
  }

  rope_for(1);  // built once here; dynamic NTK scaling rebuilds it when the length needs
  layers_.resize((size_t)cfg_.num_hidden_layers);
  for (int l = 0; l < (int)cfg_.num_hidden_layers; ++l) {
    auto base = [&](LayerTensor t) { return layer_tensor_base(nm, l, t); };
    LayerWeights& L = layers_[l];
    L.attn_norm = be_.load_vector(require_vector(ck, base(LayerTensor::AttnNorm) + ".weight", H));
    L.ffn_norm = be_.load_vector(require_vector(ck, base(LayerTensor::FfnNorm) + ".weight", H));
    L.qkv = be_.load_linear({linear_source(ck, base(LayerTensor::Q), qd, H),
                             linear_source(ck, base(LayerTensor::K), kvd, H),
                             linear_source(ck, base(LayerTensor::V), kvd, H)});
    if (cfg_.qkv_bias) {
      HostVector hv;
      append_vector(hv, require_vector(ck, base(LayerTensor::Q) + ".bias", qd));
      append_vector(hv, require_vector(ck, base(LayerTensor::K) + ".bias", kvd));
      append_vector(hv, require_vector(ck, base(LayerTensor::V) + ".bias", kvd));
      L.qkv_bias = be_.load_vector(hv.view("qkv_bias"));
    }
    L.o = be_.load_linear({linear_source(ck, base(LayerTensor::O), H, qd)});
    if (cfg_.o_bias) L.o_bias = be_.load_vector(require_vector(ck, base(LayerTensor::O) + ".bias", H));
    if (cfg_.qk_norm) {
      L.q_norm = be_.load_vector(require_vector(ck, base(LayerTensor::QNorm) + ".weight", hd));
      L.k_norm = be_.load_vector(require_vector(ck, base(LayerTensor::KNorm) + ".weight", hd));
    }
    L.gate_up = be_.load_gate_up({linear_source(ck, base(LayerTensor::Gate), I, H),
                                  linear_source(ck, base(LayerTensor::Up), I, H)});
    L.down = be_.load_linear({linear_source(ck, base(LayerTensor::Down), H, I)});
    if (cfg_.mlp_bias) {
      HostVector hv;
      append_vector(hv, require_vector(ck, base(LayerTensor::Gate) + ".bias", I));
      append_vector(hv, require_vector(ck, base(LayerTensor::Up) + ".bias", I));
      L.gate_up_bias = be_.load_vector(hv.view("gate_up_bias"));
      L.down_bias = be_.load_vector(require_vector(ck, base(LayerTensor::Down) + ".bias", H));
    }
  }
}

size_t LlamaModel::weight_bytes() const {
  size_t b = embed_->bytes() + final_norm_->bytes();
  if (!lm_head_is_embed_) b += lm_head_->bytes();  // tied: the same bytes
  for (const auto& L : layers_) {
    for (const Weight* w : {L.attn_norm.get(), L.ffn_norm.get(), L.qkv.get(), L.qkv_bias.get(), L.o.get(),
                            L.o_bias.get(), L.q_norm.get(), L.k_norm.get(), L.gate_up.get(), L.down.get(),
                            L.gate_up_bias.get(), L.down_bias.get()})
      if (w) b += w->bytes();
  }
  return b;
}

void LlamaModel::ensure_scratch(int n_tokens, int n_logits) {
  if (n_tokens <= cap_tokens_ && n_logits <= cap_logits_) return;
  cap_tokens_ = std::max(n_tokens, cap_tokens_);
  cap_logits_ = std::max(n_logits, cap_logits_);
  const int64_t T = cap_tokens_, L = cap_logits_, H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int64_t qkvd = cfg_.q_dim() + 2 * cfg_.kv_dim();
  const int64_t widest = std::max<int64_t>(H, cfg_.q_dim());
  const DType a = act_;
  const size_t bytes = tensor_bytes(a, T, H) * 2 + tensor_bytes(a, T, qkvd) + tensor_bytes(a, T, cfg_.q_dim()) +
                       tensor_bytes(a, T, widest) + tensor_bytes(a, T, 2 * I) + tensor_bytes(a, T, I) +
                       tensor_bytes(a, L, H) + tensor_bytes(DType::F32, L, cfg_.vocab_size);
  buf_.reset();  // free the old scratch first (device memory)
  buf_ = be_.alloc(bytes);
  size_t off = 0;
  void* base = buf_->data();
  x_ = make_tensor(base, off, a, T, H);
  h_ = make_tensor(base, off, a, T, H);
  qkv_ = make_tensor(base, off, a, T, qkvd);
  attn_ = make_tensor(base, off, a, T, cfg_.q_dim());
  tmp_ = make_tensor(base, off, a, T, widest);
  gu_ = make_tensor(base, off, a, T, 2 * I);
  act_t_ = make_tensor(base, off, a, T, I);
  sel_ = make_tensor(base, off, a, L, H);
  logits_ = make_tensor(base, off, DType::F32, L, cfg_.vocab_size);
}

const RopeTable& LlamaModel::rope_for(int64_t seq_len) {
  RopeParams p = make_rope_params(cfg_, seq_len);
  if (!rope_freq_factors_.empty())
    for (size_t i = 0; i < p.inv_freq.size(); ++i) p.inv_freq[i] /= rope_freq_factors_[i];
  // Only dynamic NTK scaling depends on the length; every other kind builds the table once.
  if (!rope_ || !(rope_->params == p)) rope_ = be_.load_rope(p);
  return *rope_;
}

Tensor LlamaModel::forward(const BatchLayout& b, KvStorage& kv) {
  const int T = b.n_tokens;
  const int n_out = (int)b.logit_rows.size();
  check(T > 0, "forward: empty batch");
  ensure_scratch(T, std::max(n_out, 1));
  const int64_t H = cfg_.hidden_size, qd = cfg_.q_dim(), kvd = cfg_.kv_dim();
  const int nh = (int)cfg_.num_attention_heads;
  const float eps = cfg_.rms_norm_eps;
  const float scale = 1.0f / std::sqrt((float)cfg_.head_dim);

  int max_pos = 0;
  for (int t = 0; t < T; ++t) max_pos = std::max(max_pos, b.positions[t]);
  const RopeTable& rope = cfg_.rope_scaling.type == RopeScaling::Type::Dynamic || !rope_
                              ? rope_for((int64_t)max_pos + 1)
                              : *rope_;

  be_.prepare_batch(b);
  Tensor x = x_.rows_view(0, T), h = h_.rows_view(0, T), qkv = qkv_.rows_view(0, T);
  Tensor attn = attn_.rows_view(0, T), gu = gu_.rows_view(0, T), act = act_t_.rows_view(0, T);
  Tensor o = tmp_.rows_view(0, T).cols_view(0, H);
  Tensor q = qkv.cols_view(0, qd), k = qkv.cols_view(qd, kvd), v = qkv.cols_view(qd + kvd, kvd);

  be_.embedding(*embed_, b, x);
  be_.rms_norm(x, *layers_[0].attn_norm, eps, h);
  bool qkv_ready = false;  // the previous layer computed this layer's QKV (fused with its norm)
  for (int l = 0; l < (int)layers_.size(); ++l) {
    const LayerWeights& L = layers_[l];
    if (observer) observer(l, "qkv", h);
    if (!qkv_ready) be_.linear(h, *L.qkv, L.qkv_bias.get(), qkv);
    qkv_ready = false;
    be_.rope_kv_attention(q, k, v, nh, L.q_norm.get(), L.k_norm.get(), eps, rope, kv, l, scale, b,
                          attn);
    if (observer) observer(l, "o", attn);
    be_.linear(attn, *L.o, L.o_bias.get(), o);
    be_.add_rms_norm(x, o, *L.ffn_norm, eps, h);
    if (observer) observer(l, "gate_up", h);  // AWQ calibration: each linear's input
    be_.linear_silu_mul(h, *L.gate_up, L.gate_up_bias.get(), gu, act);
    if (observer) observer(l, "down", act);
    if (l + 1 < (int)layers_.size() && !observer) {
      // the down projection, the residual add and the next layer's input norm + QKV projection
      const LayerWeights& N = layers_[l + 1];
      be_.linear_add_rms_norm_linear(act, *L.down, L.down_bias.get(), o, x, *N.attn_norm, eps, h,
                                     *N.qkv, N.qkv_bias.get(), qkv);
      qkv_ready = true;
    } else {
      be_.linear(act, *L.down, L.down_bias.get(), o);
      const Weight& next_norm = l + 1 < (int)layers_.size() ? *layers_[l + 1].attn_norm : *final_norm_;
      be_.add_rms_norm(x, o, next_norm, eps, h);
    }
  }
  if (n_out == 0) return logits_.rows_view(0, 0);
  Tensor sel = sel_.rows_view(0, n_out), lg = logits_.rows_view(0, n_out);
  be_.gather_rows(h, b, sel);
  be_.linear(sel, *lm_head_, nullptr, lg);
  return lg;
}

void LlamaModel::forward(const BatchLayout& b, KvStorage& kv, std::vector<float>& logits) {
  const Tensor lg = forward(b, kv);
  be_.synchronize();
  logits.resize((size_t)(lg.rows * lg.cols));
  if (!logits.empty()) be_.to_host(logits.data(), lg.data, logits.size() * sizeof(float));
}

}  // namespace perfx
