// The CUDA backend (cuda_backend_impl.h): weight upload and repacking (W4 / W8 layouts, dense
// rows in the activation dtype), the dequantized copies for large M, the paged KV cache.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/reference.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "core/mmap.h"

namespace perfx::cuda::backend_impl {

namespace {

/// "a W4 weight [out, in]": what an out-of-memory error names.
std::string kind_name(const char* kind, const Weight& w) {
  return std::string("a ") + kind + " weight [" + std::to_string(w.out) + ", " +
         std::to_string(w.in) + "]";
}

}  // namespace

std::unique_ptr<Weight> CudaBackend::load_linear(const std::vector<LinearSource>& parts) {
  return load_linear_ordered(parts, W4RowOrder::kStacked);
}

std::unique_ptr<Weight> CudaBackend::load_gate_up(const std::vector<LinearSource>& parts) {
  const bool pair = parts.size() == 2 && parts[0].out == parts[1].out && parts[0].out % 8 == 0;
  return load_linear_ordered(parts, pair ? W4RowOrder::kInterleave8 : W4RowOrder::kStacked);
}

std::unique_ptr<Weight> CudaBackend::load_linear_ordered(const std::vector<LinearSource>& parts,
                                                         W4RowOrder order) {
  use_device();
  check(!parts.empty(), "load_linear: no parts");
  auto w = std::make_unique<CudaWeight>();
  w->freed = weights_freed_;
  if (l2_prefetch_cap_ > 0) w->graphs = gen_;  // graphs may warm it for another linear
  w->in = parts[0].in;
  w->out = 0;
  bool all_int4 = true, all_q4_0 = true, all_q8_0 = true;
  for (const auto& p : parts) {
    check(p.in == w->in, "fused linear parts have different input widths");
    w->out += p.out;
    all_int4 = all_int4 && p.is_int4() && !p.int4->has_mins();
    all_q4_0 = all_q4_0 && !p.is_int4() && p.weight.dtype == DType::Q4_0;
    all_q8_0 = all_q8_0 && !p.is_int4() && p.weight.dtype == DType::Q8_0;
  }
  if (all_int4 || all_q4_0) {
    std::vector<Int4Matrix> decoded;  // GGUF Q4_0: group 32, zero 8
    std::vector<const Int4Matrix*> ptrs;
    if (all_q4_0) {
      for (const auto& p : parts) decoded.push_back(int4_from_gguf(p.weight));
      for (const auto& m : decoded) ptrs.push_back(&m);
    } else {
      for (const auto& p : parts) ptrs.push_back(p.int4.get());
    }
    // A group size or shape the kernels do not take: fp16 dense below. Only packing may fall
    // back; a failed upload (out of GPU memory) is the error, naming the int4 bytes it needed.
    std::optional<W4Packed> packed;
    guarded("W4 packing", [&] {
      try {
        packed = pack_w4(ptrs, order);
      } catch (const Error&) {
      }
    });
    if (packed) {
      guarded("W4 upload", [&] {
        w->w4 = std::make_unique<W4Weight>(W4Weight::upload(*packed, kind_name("W4", *w)));
      });
      w->interleaved = order == W4RowOrder::kInterleave8;
      w->kind = CudaWeight::Kind::W4;
      release_sources(parts);
      dense_copy(*w);
      return w;
    }
  } else if (all_q8_0) {
    std::vector<Int8Matrix> decoded;
    std::vector<const Int8Matrix*> ptrs;
    for (const auto& p : parts) decoded.push_back(int8_from_gguf(p.weight));
    for (const auto& m : decoded) ptrs.push_back(&m);
    std::optional<W8Packed> packed;  // as W4 above
    guarded("W8 packing", [&] {
      try {
        packed = pack_w8(ptrs);
      } catch (const Error&) {
      }
    });
    if (packed) {
      guarded("W8 upload", [&] {
        w->w8 = std::make_unique<W8Weight>(W8Weight::upload(*packed, kind_name("W8", *w)));
      });
      w->kind = CudaWeight::Kind::W8;
      release_sources(parts);
      dense_copy(*w);
      return w;
    }
  }
  // Dense: every part converted to the activation dtype, stacked by rows.
  w->kind = CudaWeight::Kind::Dense;
  w->mem.alloc((size_t)(w->out * w->in) * 2,
               "a weight [" + std::to_string(w->out) + ", " + std::to_string(w->in) + "]");
  int64_t row0 = 0;
  for (const auto& p : parts) {
    upload_dense_rows(p, static_cast<uint16_t*>(w->mem.get()) + row0 * w->in);
    row0 += p.out;
  }
  release_sources(parts);
  return w;
}

std::unique_ptr<Weight> CudaBackend::load_vector(const TensorView& v) {
  use_device();
  auto w = std::make_unique<CudaWeight>();
  w->kind = CudaWeight::Kind::Vector;
  w->out = v.numel();
  w->in = 1;
  std::vector<float> host((size_t)w->out);
  float_to_f32(v.dtype, v.data, host.data(), w->out, "tensor '" + v.name + "'");
  w->mem.alloc(host.size() * 4, "vector '" + v.name + "'");
  cuda_ok(cudaMemcpy(w->mem.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice),
          "upload vector");
  return w;
}

std::unique_ptr<Weight> CudaBackend::load_embedding(const TensorView& table) {
  use_device();
  check(table.shape.size() == 2, "embedding '" + table.name + "' is not 2-D");
  LinearSource s;
  s.weight = table;
  s.out = table.shape[0];
  s.in = table.shape[1];
  auto w = std::make_unique<CudaWeight>();
  w->freed = weights_freed_;
  if (l2_prefetch_cap_ > 0) w->graphs = gen_;  // graphs may warm it for another linear
  w->kind = CudaWeight::Kind::Dense;
  w->out = s.out;
  w->in = s.in;
  w->mem.alloc((size_t)(s.out * s.in) * 2, "the embedding table");
  upload_dense_rows(s, static_cast<uint16_t*>(w->mem.get()));
  vocab_ = std::max<int64_t>(vocab_, s.out);
  return w;
}

std::unique_ptr<RopeTable> CudaBackend::load_rope(const RopeParams& p) {
  use_device();
  check(p.rot_dim >= 0 && p.rot_dim <= p.head_dim && p.rot_dim % 2 == 0 &&
            (int)p.inv_freq.size() == p.rot_dim / 2,
        "load_rope: inconsistent RoPE parameters");
  auto t = std::make_unique<CudaRope>();
  t->params = p;
  t->inv_freq.alloc(std::max<size_t>(p.inv_freq.size(), 1) * 4, "the RoPE table");
  if (!p.inv_freq.empty())
    cuda_ok(cudaMemcpy(t->inv_freq.get(), p.inv_freq.data(), p.inv_freq.size() * 4,
                       cudaMemcpyHostToDevice),
            "upload RoPE table");
  gen_->value++;
  return t;
}

double CudaBackend::kv_bytes_per_token(int n_kv_heads, int head_dim,
                                       const KvCacheTypes& types) const {
  if (types.k.value_or(act_) != DType::Q8_0)
    return Backend::kv_bytes_per_token(n_kv_heads, head_dim, types);
  // CudaKv's q8 layout: an int8 per value and a scale record per (slot, KV head), K and V
  return 2.0 * n_kv_heads * (head_dim + 2.0 * q8_scale_stride(head_dim));
}

void CudaBackend::check_kv(int n_kv_heads, int head_dim, const KvCacheTypes& types) const {
  check_kv_shape(n_kv_heads, head_dim);
  check(head_dim <= 256 && head_dim % 2 == 0,
        "the CUDA backend needs an even head_dim of at most 256, got " + std::to_string(head_dim));
  const DType kt = types.k.value_or(act_), vt = types.v.value_or(act_);
  for (DType t : {kt, vt})
    check_kv_type(t == act_ || t == DType::Q8_0,
                  std::string("the CUDA backend keeps the KV cache in the activation dtype (") +
                      kv_type_name(act_) + ") or q8_0; " + kv_type_unsupported(t) + " on it");
  check_kv_type(kt == vt, std::string("the CUDA backend takes one type for K and V (") +
                              kKvTypeFlags + "); --cache-type-k " + kv_type_name(kt) +
                              " and --cache-type-v " + kv_type_name(vt) + " differ");
  check_kv_q8_head_dim(kt, head_dim);
}

std::unique_ptr<KvStorage> CudaBackend::create_kv(int n_layers, int n_blocks, int block_size,
                                                  int n_kv_heads, int head_dim,
                                                  const KvCacheTypes& types) {
  use_device();
  check_kv_counts(n_layers, n_blocks, block_size);
  check_kv(n_kv_heads, head_dim, types);
  const bool q8 = types.k.value_or(act_) == DType::Q8_0;
  auto kv = std::make_unique<CudaKv>();
  kv->n_layers = n_layers;
  kv->n_blocks = n_blocks;
  kv->block_size = block_size;
  kv->n_kv_heads = n_kv_heads;
  kv->head_dim = head_dim;
  kv->q8 = q8;
  kv->pool_elems = (size_t)n_blocks * block_size * n_kv_heads * head_dim;
  kv->mem.alloc(kv->pool_bytes() * 2 * (size_t)n_layers,
                "the KV cache (" + std::to_string((int64_t)n_blocks * block_size) + " tokens)");
  size_t need = 0;
  if (paged_attention_takes(head_dim, {}))
    guarded("attention workspace", [&] { need = paged_attention_workspace_bytes(head_dim); });
  if (attn_ws_.size() < need) attn_ws_.alloc(need, "the attention workspace");
  if (need > 0 && attn_counters_.get() == nullptr) {  // zeroed once; every call leaves them so
    attn_counters_.alloc(paged_attention_counters_bytes(), "the attention split counters");
    cuda_ok(cudaMemsetAsync(attn_counters_.get(), 0, attn_counters_.size(), stream_),
            "cudaMemsetAsync");
  }
  return kv;
}

void CudaBackend::upload_dense_rows(const LinearSource& p, uint16_t* dst) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, (64 << 20) / std::max<int64_t>(p.in * 2, 1));
  std::vector<uint16_t> host((size_t)(std::min(rows_per_chunk, p.out) * p.in));
  std::vector<float> row((size_t)p.in);
  for (int64_t r0 = 0; r0 < p.out; r0 += rows_per_chunk) {
    const int64_t n = std::min(rows_per_chunk, p.out - r0);
    for (int64_t r = 0; r < n; ++r) {
      if (p.is_int4()) {
        for (int64_t k = 0; k < p.in; ++k) row[(size_t)k] = p.int4->dequant(r0 + r, k);
      } else {
        check(is_weight_dtype(p.weight.dtype), "tensor '" + p.weight.name + "' has dtype " +
                                                   dtype_name(p.weight.dtype) +
                                                   ", not usable as a weight");
        check(p.weight.shape.size() == 2 && p.weight.shape[0] == p.out && p.weight.shape[1] == p.in,
              "tensor '" + p.weight.name + "' has shape " + p.weight.shape_str() + ", expected [" +
                  std::to_string(p.out) + ", " + std::to_string(p.in) + "]");
        const size_t rb = dtype_row_bytes(p.weight.dtype, p.in);
        cpu::dequantize_row(p.weight.dtype,
                            static_cast<const uint8_t*>(p.weight.data) + (size_t)(r0 + r) * rb,
                            row.data(), p.in);
      }
      for (int64_t k = 0; k < p.in; ++k)
        host[(size_t)(r * p.in + k)] = to_act_bits(row[(size_t)k], act_);
    }
    cuda_ok(
        cudaMemcpy(dst + r0 * p.in, host.data(), (size_t)(n * p.in) * 2, cudaMemcpyHostToDevice),
        "upload weight");
  }
}

void CudaBackend::dense_copy(CudaWeight& w) {
  const size_t bytes = (size_t)(w.out * w.in) * 2;
  if (dense_budget_ == 0 || bytes > dense_budget_ - dense_total_) return;
  const std::string what = "a dequantized copy of a weight [" + std::to_string(w.out) + ", " +
                           std::to_string(w.in) + "] (PERFX_CUDA_DENSE_WEIGHTS=0: none)";
  if (dense_budget_ != SIZE_MAX) {  // auto: only where it fits with room to spare
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b < 2 * bytes) return;
  }
  w.dense.alloc(bytes, what);
  guarded("dense copy", [&] {
    if (w.w4)
      w4_dequantize(w.w4->view(), w.dense.get(), act_, w.in, stream_);
    else
      w8_dequantize(w.w8->view(), w.dense.get(), act_, w.in, stream_);
  });
  cuda_ok(cudaStreamSynchronize(stream_), "dense copy");
  dense_total_ += bytes;
}

void CudaBackend::release_sources(const std::vector<LinearSource>& parts) {
  for (const auto& p : parts)
    if (!p.is_int4() && p.weight.data) release_pages(p.weight.data, p.weight.nbytes);
}

}  // namespace perfx::cuda::backend_impl
