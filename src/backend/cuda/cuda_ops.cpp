// The CUDA backend (cuda_backend_impl.h): the forward pass's ops — embedding, norms, linear layers
// (the W4 / W8 / dense ladder, L2 warming), RoPE + KV store, paged attention, SwiGLU, gathers.
#include <string>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/rope_kv.cuh"

namespace perfx::cuda::backend_impl {

void CudaBackend::embedding(const Weight& table, const BatchLayout& b, Tensor out) {
  last_linear_ = nullptr;  // not between a linear and attention
  if (replaying()) return;
  OpScope scope(*this, profile_ ? "embedding" : "");
  const auto& w = cw(table);
  PERFX_CHECK(out.dtype == act_ && out.cols == w.in && out.rows >= b.n_tokens,
              "embedding: shape or dtype mismatch");
  launch_embedding(w.mem.get(), ids_d_, b.n_tokens, w.in, out.data, out.stride, act_, stream_);
  launched("embedding");
}

void CudaBackend::rms_norm(Tensor x, const Weight& w, float eps, Tensor out) {
  last_linear_ = nullptr;  // not between a linear and attention
  if (replaying() || (skip_ & kSkipNorm)) return;
  OpScope scope(*this, profile_ ? "rms_norm" : "");
  PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && x.rows == out.rows && x.cols == out.cols &&
                  w.out == x.cols,
              "rms_norm: shape or dtype mismatch");
  launch_rms_norm(x.data, x.stride, cw(w).vec(), eps, (int)x.rows, x.cols, out.data, out.stride,
                  act_, stream_);
  launched("rms_norm");
}

void CudaBackend::add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps, Tensor out) {
  last_linear_ = nullptr;  // not between a linear and attention
  if (replaying() || (skip_ & kSkipNorm)) return;
  OpScope scope(*this, profile_ ? "add_rms_norm" : "");
  PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && residual.dtype == act_ &&
                  x.rows == out.rows && residual.rows == x.rows && x.cols == out.cols &&
                  residual.cols == x.cols && w.out == x.cols,
              "add_rms_norm: shape or dtype mismatch");
  launch_add_rms_norm(residual.data, residual.stride, x.data, x.stride, cw(w).vec(), eps,
                      (int)x.rows, x.cols, out.data, out.stride, act_, stream_);
  launched("add_rms_norm");
}

void CudaBackend::linear(Tensor x, const Weight& wt, const Weight* bias, Tensor y) {
  if (replaying() || (skip_ & kSkipLinear)) return;
  OpScope scope(*this, profile_ ? linear_name(wt, x.rows) : std::string());
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

void CudaBackend::rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                                const Weight* k_norm, float eps, const RopeTable& rope,
                                KvStorage& kvs, int layer, const BatchLayout& b) {
  if (replaying() || (skip_ & kSkipRope)) return;
  OpScope scope(*this, profile_ ? "rope_kv_store" : "");
  auto& kv = static_cast<CudaKv&>(kvs);
  const RopeParams& rp = rope.params;
  PERFX_CHECK(q.dtype == act_ && k.dtype == act_ && v.dtype == act_ && rp.head_dim == kv.head_dim &&
                  q.cols == (int64_t)n_q_heads * kv.head_dim &&
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

void CudaBackend::attention(Tensor q, const KvStorage& kvs, int layer, int n_q_heads, float scale,
                            const BatchLayout& b, Tensor out) {
  if (replaying() || (skip_ & kSkipAttn)) return;
  OpScope scope(*this, profile_ ? "attention" : "");
  mark_feeds_attention();
  const auto& kv = static_cast<const CudaKv&>(kvs);
  PERFX_CHECK(q.dtype == act_ && out.dtype == act_ && q.rows == b.n_tokens && out.rows == q.rows &&
                  q.cols == (int64_t)n_q_heads * kv.head_dim && out.cols == q.cols && layer >= 0 &&
                  layer < kv.n_layers && n_q_heads % kv.n_kv_heads == 0,
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

void CudaBackend::rope_kv_attention(Tensor q, Tensor k, Tensor v, int n_q_heads,
                                    const Weight* q_norm, const Weight* k_norm, float eps,
                                    const RopeTable& rope, KvStorage& kvs, int layer, float scale,
                                    const BatchLayout& b, Tensor out) {
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
  OpScope scope(*this, profile_ ? "rope_kv_attention" : "");
  mark_feeds_attention();
  const RopeParams& rp = rope.params;
  PERFX_CHECK(q.dtype == act_ && k.dtype == act_ && v.dtype == act_ && out.dtype == act_ &&
                  rp.head_dim == hd && q.rows == b.n_tokens && k.rows == q.rows &&
                  v.rows == q.rows && out.rows == q.rows && q.cols == (int64_t)n_q_heads * hd &&
                  out.cols == q.cols && k.cols == (int64_t)kv.n_kv_heads * hd && v.cols == k.cols &&
                  layer >= 0 && layer < kv.n_layers,
              "rope_kv_attention: shape or dtype mismatch");
  // The kernel writes each new token where its block table points; rope_kv_store would write
  // it to b.slots. They must agree (the engine's layouts always do).
  for (int t = 0; t < b.n_tokens; ++t) {
    const int s = b.token_seq[t], p = b.positions[t], bs = kv.block_size;
    const int blk = p / bs < b.max_blocks ? b.block_tables[(size_t)s * b.max_blocks + p / bs] : -1;
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

PagedAttentionArgs CudaBackend::paged_args(Tensor q, const CudaKv& kv, int layer, int n_q_heads,
                                           float scale, Tensor out) const {
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

void CudaBackend::silu_mul(Tensor gate_up, Tensor out) {
  if (replaying()) return;
  OpScope scope(*this, profile_ ? "silu_mul" : "");
  PERFX_CHECK(gate_up.dtype == act_ && out.dtype == act_ && gate_up.rows == out.rows &&
                  gate_up.cols == 2 * out.cols,
              "silu_mul: shape or dtype mismatch");
  launch_silu_mul(gate_up.data, gate_up.stride, (int)out.rows, out.cols, out.data, out.stride, act_,
                  stream_);
  launched("silu_mul");
}

void CudaBackend::linear_silu_mul(Tensor x, const Weight& wt, const Weight* bias, Tensor gu,
                                  Tensor act) {
  if (skip_ & kSkipLinear) return;
  const auto& w = cw(wt);
  if (!w.interleaved) return Backend::linear_silu_mul(x, wt, bias, gu, act);
  if (replaying()) return;
  OpScope scope(*this, profile_ ? "linear_silu_mul" : "");
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

void CudaBackend::linear_add_rms_norm_linear(Tensor x, const Weight& w1t, const Weight* b1,
                                             Tensor y1, Tensor residual, const Weight& norm_w,
                                             float eps, Tensor h, const Weight& w2t,
                                             const Weight* b2, Tensor y2) {
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
  OpScope scope(*this, profile_ ? "linear_add_rms_norm_linear" : "");
  const L2Prefetch pf1 = l2_prefetch_after(w1, M), pf2 = l2_prefetch_after(w2, M);
  last_linear_ = &w2;
  guarded("linear_add_rms_norm_linear (W4A16)", [&] {
    linear_w4a16_norm_pair(w1.w4->view(), x.data, x.stride, b1 ? cw(*b1).vec() : nullptr,
                           residual.data, residual.stride, cw(norm_w).vec(), eps, w2.w4->view(),
                           y2.data, y2.stride, b2 ? cw(*b2).vec() : nullptr, act_, M, stream_, pf1,
                           pf2);
  });
  launched("linear_add_rms_norm_linear");
}

void CudaBackend::mark_feeds_attention() {
  after_attention_ = true;
  if (last_linear_ != nullptr && !last_linear_->feeds_attention) {
    last_linear_->feeds_attention = true;
    // graphs captured before knew no better (only w4_gemv3 takes the trigger)
    if (qkv_trigger_pct() > 0 && last_linear_->w4) gen_->value++;
  }
  last_linear_ = nullptr;
}

L2Prefetch CudaBackend::l2_prefetch_after(const CudaWeight& w, int M) {
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

void CudaBackend::quant_linear(const CudaWeight& w, const Tensor& x, const Tensor& y,
                               const float* b, const L2Prefetch& pf, int trigger_pct) {
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

void CudaBackend::gather_rows(Tensor x, const BatchLayout& b, Tensor out) {
  if (replaying()) return;
  OpScope scope(*this, profile_ ? "gather_rows" : "");
  PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && x.cols == out.cols &&
                  out.rows >= (int64_t)b.logit_rows.size(),
              "gather_rows: shape or dtype mismatch");
  launch_gather_rows(x.data, x.stride, rows_d_, (int)b.logit_rows.size(), x.cols, out.data,
                     out.stride, act_, stream_);
  launched("gather_rows");
}

void* CudaBackend::dequant_scratch(int64_t out, int64_t in) {
  return workspace((size_t)(out * in) * 2 + 256).ptr;
}

void CudaBackend::gemm(const void* W, int64_t N, int64_t K, const Tensor& x, const Tensor& y,
                       const float* bias) {
  gemm_raw(W, N, K, x.data, (int)x.rows, x.stride, y.data, y.dtype, y.stride, bias);
}

void CudaBackend::gemm_raw(const void* W, int64_t N, int64_t K, const void* x, int M, int64_t ldx,
                           void* y, DType yt, int64_t ldy, const float* bias) {
  // Decode (M <= 8): a GEMV streaming each row with 16-byte loads; cuBLAS for larger M.
  if (M <= 8 && launch_dense_gemv(W, N, K, x, M, ldx, y, yt, ldy, bias, act_, stream_)) return;
  const cudaDataType_t ab = act_ == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const cudaDataType_t c = yt == DType::F32 ? CUDA_R_32F : ab;
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: Yᵀ [N, M] = W [N, K] · Xᵀ [K, M]; row-major W [N, K] is col-major Wᵀ.
  cublas_ok(
      blas_->gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, M, (int)K, &alpha, W, ab, (int)K, x,
                     ab, (int)ldx, &beta, y, c, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
  if (bias) launch_add_bias(y, ldy, yt, bias, M, N, stream_);
}

void CudaBackend::dense_gemm_fn(void* ctx, const void* w_dense, int64_t N, int64_t K, const void* x,
                                DType, int M, int64_t ldx, void* y, DType yt, int64_t ldy,
                                const float* bias, cudaStream_t) {
  static_cast<CudaBackend*>(ctx)->gemm_raw(w_dense, N, K, x, M, ldx, y, yt, ldy, bias);
}

}  // namespace perfx::cuda::backend_impl
