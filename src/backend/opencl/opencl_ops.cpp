// The OpenCL backend (opencl_backend_impl.h): the forward pass's ops onto kernels/*.cl.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/sampling.h"
#include "backend/opencl/opencl_backend_impl.h"

namespace perfx::opencl::backend_impl {

void OpenClBackend::embedding(const Weight& table, const BatchLayout& b, Tensor out) {
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

void OpenClBackend::rms_norm(Tensor x, const Weight& w, float eps, Tensor out) {
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

void OpenClBackend::add_rms_norm(Tensor residual, Tensor x, const Weight& w, float eps,
                                 Tensor out) {
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

void OpenClBackend::linear(Tensor x, const Weight& wt, const Weight* bias, Tensor y) {
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

void OpenClBackend::rope_kv_store(Tensor q, Tensor k, Tensor v, int n_q_heads, const Weight* q_norm,
                                  const Weight* k_norm, float eps, const RopeTable& rope,
                                  KvStorage& kvs, int layer, const BatchLayout& b) {
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

void OpenClBackend::attention(Tensor q, const KvStorage& kvs, int layer, int n_q_heads, float scale,
                              const BatchLayout& b, Tensor out) {
  const auto& kv = static_cast<const OclKv&>(kvs);
  const int hd = kv.head_dim, nkv = kv.n_kv_heads, T = b.n_tokens;
  PERFX_CHECK(q.dtype == act_ && out.dtype == act_ && q.cols == (int64_t)n_q_heads * hd &&
                  out.cols == q.cols && q.rows >= T && out.rows >= T && n_q_heads > 0 &&
                  n_q_heads % nkv == 0 && layer >= 0 && layer < kv.n_layers &&
                  (int)b.positions.size() == T && (int)b.token_seq.size() == T,
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

void OpenClBackend::silu_mul(Tensor gate_up, Tensor out) {
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

void OpenClBackend::gather_rows(Tensor x, const BatchLayout& b, Tensor out) {
  PERFX_CHECK(x.dtype == act_ && out.dtype == act_ && x.cols == out.cols &&
                  out.rows >= (int64_t)b.logit_rows.size(),
              "gather_rows: shape or dtype mismatch");
  for (int32_t r : b.logit_rows) PERFX_CHECK(r >= 0 && r < x.rows, "gather_rows: row out of range");
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

void OpenClBackend::sample(Tensor logits, const std::vector<SampleRow>& rows, int32_t* ids) {
  PERFX_CHECK(logits.dtype == DType::F32, "sample: logits must be F32");
  for (const auto& r : rows)
    PERFX_CHECK(r.row >= 0 && r.row < logits.rows, "sample: row out of range");
  // Plain greedy rows: argmax on the device, only the ids come back. Rows with penalties or a
  // temperature, and rows the argmax found a NaN or +inf in (id -1: the reference sampler's check
  // names it): the row travels to the host and the reference sampler picks.
  std::vector<int32_t> dev_rows;
  std::vector<size_t> dev_at;
  std::vector<bool> picked(rows.size(), false);
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
    for (size_t i = 0; i < n; ++i) {
      ids[dev_at[i]] = got[i];
      if (got[i] >= 0) picked[dev_at[i]] = true;
    }
  }
  std::vector<float> row((size_t)logits.cols);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (picked[i]) continue;
    to_host(row.data(), logits.rows_view(rows[i].row, 1).data, row.size() * 4);
    ids[i] = cpu::sample_logits(row.data(), (int)logits.cols, rows[i], sample_scratch_);
  }
}

std::string OpenClBackend::weight_opts(const OclWeight& w) const {
  std::string o = " -DWF=" + std::to_string(w.wf);
  if (w.wf == kQ4 || w.wf == kQ4M) o += " -DGS=" + std::to_string(w.gs);
  return o;
}

GemmTiling OpenClBackend::gemm_tiling(const OclWeight& w, int T) {
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

void OpenClBackend::ensure_rope(const OclRope& r, int max_pos) {
  const int half = r.params.rot_dim / 2;
  if (max_pos < r.cap && r.cs.get()) return;
  const int64_t cap = std::max<int64_t>({(int64_t)max_pos + 1, r.cap * 2, 256});
  const size_t bytes = (size_t)cap * (size_t)std::max(half, 1) * 4;
  // Before the host tables: a position far past any context is this error, not gigabytes of
  // cos / sin (or std::bad_alloc).
  check(bytes <= sh_->max_one,
        "position " + std::to_string(max_pos) + ": the RoPE table up to it needs " + mib(bytes) +
            " in one buffer, more than the largest allocation allowed (" + mib(sh_->max_one) + ")");
  std::vector<float> cs(bytes / 4), sn(cs.size());
  for (int64_t p = 0; p < cap; ++p)
    for (int i = 0; i < half; ++i) {
      const float ang = (float)p * r.params.inv_freq[(size_t)i];
      cs[(size_t)p * half + i] = (float)std::cos((double)ang) * r.params.attention_factor;
      sn[(size_t)p * half + i] = (float)std::sin((double)ang) * r.params.attention_factor;
    }
  // Both new tables filled before either replaces its old one: a failure (out of memory for the
  // second) leaves the old tables and their cap, which every earlier position still reads.
  DevMem new_cs, new_sn;
  new_cs.alloc(sh_, bytes, "the RoPE table");
  new_sn.alloc(sh_, bytes, "the RoPE table");
  write(new_cs.get(), 0, cs.data(), bytes);
  write(new_sn.get(), 0, sn.data(), bytes);
  r.cs = std::move(new_cs);
  r.sn = std::move(new_sn);
  r.cap = cap;
}

}  // namespace perfx::opencl::backend_impl
