// The OpenCL backend (opencl_backend_impl.h): weight upload into the kernels' formats, split by
// rows over several buffers when one would exceed the largest allocation; the paged KV cache.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cpu/reference.h"
#include "backend/opencl/opencl_backend_impl.h"
#include "core/mmap.h"

namespace perfx::opencl::backend_impl {

std::unique_ptr<Weight> OpenClBackend::load_linear(const std::vector<LinearSource>& parts) {
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

std::unique_ptr<Weight> OpenClBackend::load_vector(const TensorView& v) {
  auto w = std::make_unique<OclWeight>();
  w->out = v.numel();
  w->in = 1;
  std::vector<float> host((size_t)w->out);
  float_to_f32(v.dtype, v.data, host.data(), w->out, "tensor '" + v.name + "'");
  w->vec.alloc(sh_, std::max<size_t>(host.size(), 1) * 4, "vector '" + v.name + "'");
  write(w->vec.get(), 0, host.data(), host.size() * 4);
  return w;
}

std::unique_ptr<Weight> OpenClBackend::load_embedding(const TensorView& table) {
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

std::unique_ptr<RopeTable> OpenClBackend::load_rope(const RopeParams& p) {
  check(p.rot_dim >= 0 && p.rot_dim <= p.head_dim && p.rot_dim % 2 == 0 &&
            (int)p.inv_freq.size() == p.rot_dim / 2,
        "load_rope: inconsistent RoPE parameters");
  auto t = std::make_unique<OclRope>();
  t->params = p;
  return t;
}

void OpenClBackend::check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const {
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

std::unique_ptr<KvStorage> OpenClBackend::create_kv(int n_layers, int n_blocks, int block_size,
                                                    int n_kv_heads, int head_dim,
                                                    const KvCacheTypes& types) {
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

void OpenClBackend::precompile(const OclWeight& w) {
  GemvConfig c;
  c.image = images_;
  c.set(forced_ > 0 ? forced_ : kGemvDefault);
  gemv_fits(w, c);
  gemm_tiling(w, 2);
  gemm_tiling(w, 64);
}

int OpenClBackend::dense_format(const std::vector<LinearSource>& parts) const {
  const DType d0 = parts[0].is_int4() ? DType::I8 : parts[0].weight.dtype;
  bool same = true;
  for (const auto& p : parts) same = same && !p.is_int4() && p.weight.dtype == d0;
  if (same && d0 == DType::F16) return kF16;
  if (same && d0 == DType::BF16) return kBF16;
  return act_ == DType::F16 ? kF16 : kF32;
}

template <typename Locate>
RowFill OpenClBackend::dense_fill(const std::vector<LinearSource>& parts, int wf,
                                  Locate locate) const {
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

void OpenClBackend::store_row(const float* row, int64_t n, int wf, uint8_t* q) {
  if (wf == kF32) {
    std::memcpy(q, row, (size_t)n * 4);
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    const uint16_t h = fp32_to_fp16(row[k]);
    std::memcpy(q + 2 * k, &h, 2);
  }
}

void OpenClBackend::upload(OclWeight& w, const RowFill& fill, const std::string& what) {
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

void OpenClBackend::release_sources(const std::vector<LinearSource>& parts) {
  for (const auto& p : parts)
    if (!p.is_int4() && p.weight.data) release_pages(p.weight.data, p.weight.nbytes);
}

}  // namespace perfx::opencl::backend_impl
