// Launchers of the CUDA backend's small kernels (norms, SwiGLU, gathers, bias, sampling helpers),
// callable from host C++ (no CUDA syntax here). Tensors are device pointers with row strides in
// elements; `act` is the activation dtype (F16 or BF16); reductions run in fp32. Every launcher
// enqueues on `stream` and returns at once; errors surface through cudaGetLastError (the backend
// checks after each op). Formulas: RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm), SwiGLU
// (Shazeer 2020).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace perfx::cuda {

/// out[t, :] = table[ids[t], :] for t < n_tokens; table [vocab, hidden] and out in `act`. A
/// negative id (a sampling kernel's −1 for a broken row, logit_check.cuh, fed to the next step)
/// writes zeros.
void launch_embedding(const void* table, const int32_t* ids, int n_tokens, int64_t hidden,
                      void* out, int64_t ldo, DType act, cudaStream_t stream);

/// out[r] = x[r] / sqrt(mean(x[r]²) + eps) * w for r < rows; x, out [rows, n] in `act`, w fp32 [n].
void launch_rms_norm(const void* x, int64_t ldx, const float* w, float eps, int rows, int64_t n,
                     void* out, int64_t ldo, DType act, cudaStream_t stream);

/// residual[r] = round(residual[r] + x[r]); out[r] = rms_norm(residual[r]) * w (fused; the norm
/// reads the rounded sum). residual, x, out [rows, n] in `act`; w fp32 [n].
void launch_add_rms_norm(void* residual, int64_t ldr, const void* x, int64_t ldx, const float* w,
                         float eps, int rows, int64_t n, void* out, int64_t ldo, DType act,
                         cudaStream_t stream);

/// out[r, i] = silu(g) * u for i < I; gu [rows, 2I], out [rows, I] in `act`. Stacked: g =
/// gu[r, i], u = gu[r, I + i]. interleaved: gate|up results in the order of a
/// W4RowOrder::kInterleave8 weight (linear.cuh), g in column 16·(i / 8) + i % 8 and u 8 columns
/// later (I % 8 == 0). bias [2I] fp32 in the parts' order (gate, then up; null: none) is added in
/// fp32 to the g / u already rounded to act (a linear with that bias rounds g + bias once instead;
/// the difference is one rounding of the projection, amplified by silu's slope).
void launch_silu_mul(const void* gu, int64_t ldg, int rows, int64_t I, void* out, int64_t ldo,
                     DType act, cudaStream_t stream, bool interleaved = false,
                     const float* bias = nullptr);

/// out[i, :] = x[rows[i], :] for i < n; x, out in `act` with `cols` columns.
void launch_gather_rows(const void* x, int64_t ldx, const int32_t* rows, int n, int64_t cols,
                        void* out, int64_t ldo, DType act, cudaStream_t stream);

/// y[r, c] += bias[c]; y [rows, cols] in `ydt` (act or F32), bias fp32 [cols].
void launch_add_bias(void* y, int64_t ldy, DType ydt, const float* bias, int rows, int64_t cols,
                     cudaStream_t stream);

/// One penalty to apply to logits[row, id] (F32): l = repeat != 1 ? (l > 0 ? l / repeat : l ·
/// repeat) : l; then l −= subtract (OpenAI presence + frequency · count); a finite l that this
/// overflows to +inf becomes FLT_MAX (cpu::sample_logits's rule). Entries are distinct (row, id).
struct PenaltyEntry {
  int32_t row, id;
  float repeat, subtract;
};
void launch_penalties(float* logits, int64_t ld, const PenaltyEntry* entries, int n,
                      cudaStream_t stream);

/// out[i] = argmax_j logits[rows[i], j] over j < vocab (lowest j on ties), F32 logits with row
/// stride ld; out int32 [n] on the device. −1 where the row holds a NaN or +inf (the model's
/// output is broken: logit_check.cuh); the host reports such a row, and an embedding fed the −1
/// writes zeros (launch_embedding).
void launch_argmax(const float* logits, int64_t ld, const int32_t* rows, int n, int vocab,
                   int32_t* out, cudaStream_t stream);

/// Overlapped decode's token ids (BatchLayout::fed_rows): out[t] = src[fed_rows[t]] when
/// fed_rows[t] >= 0, else host_ids[t]; int32 device arrays, out [n], src [n_src] (n_src * 4 bytes
/// of shared memory: at most kFeedIdsMaxRows rows). src may be out.
constexpr int kFeedIdsMaxRows = 12288;
void launch_feed_ids(const int32_t* host_ids, const int32_t* fed_rows, const int32_t* src,
                     int n_src, int32_t* out, int n, cudaStream_t stream);

/// One row to draw from with a temperature and no truncation (sample.cu).
struct SampleDraw {
  double u;           // uniform draw in [0, 1) (SampleRow::u)
  float temperature;  // > 0
  int32_t row;        // row of the logits
};
/// out[i] = the id drawn from softmax(logits[draws[i].row, :vocab] / T) at draws[i].u, as the
/// reference sampler without top-k / top-p / min-p (cpu::sample_logits): the first id, in id
/// order, where the running sum of exp((l − max) / T) (double) exceeds u · Σ; vocab − 1 if
/// rounding leaves none; −1 where the row holds a NaN or +inf (logit_check.cuh). F32 logits with
/// row stride ld (penalties already applied), draws and out [n] on the device; one 1024-thread
/// block per draw. The sums run in another order than the
/// CPU's, so a pick can differ only where u · Σ falls within rounding of a boundary.
void launch_sample_softmax(const float* logits, int64_t ld, const SampleDraw* draws, int n,
                           int vocab, int32_t* out, cudaStream_t stream);

/// One row to draw from with a temperature and top-k (1..1024, < vocab), optionally top-p / min-p
/// within the k; or top_k 0: top-p and / or min-p over the whole vocabulary (sample.cu).
struct SampleDrawTopK {
  double u;           // uniform draw in [0, 1)
  float temperature;  // > 0
  float top_p;        // >= 1: off
  float min_p;        // <= 0: off
  int32_t top_k;      // 1..1024, or 0: off (then top_p < 1 or min_p > 0)
  int32_t row;        // row of the logits
  int32_t pad = 0;
};
/// out[i] = the id the reference sampler (cpu::sample_logits) draws from logits[draws[i].row,
/// :vocab] with top-k → softmax(l / T) → top-p → min-p at draws[i].u: the same candidates in the
/// same order (logit descending, id ascending), the same float / double arithmetic on them
/// (expf may differ from the host's in the last bit, so a pick can differ only where u · Σ falls
/// within rounding of a boundary); −1 where more than 1024 logits tie with the k-th, or with
/// top_k 0 where the top-p / min-p cut falls past the 1024 most likely ids, or where the row holds
/// a NaN or +inf (the caller samples or reports that row on the host). F32 logits with row stride
/// ld (penalties applied), draws and out [n] on the device; one 1024-thread block per draw.
static_assert(sizeof(SampleDraw) == 16 && sizeof(SampleDrawTopK) == 32,
              "the draws are copied to the device as they are laid out here");
void launch_sample_top_k(const float* logits, int64_t ld, const SampleDrawTopK* draws, int n,
                         int vocab, int32_t* out, cudaStream_t stream);

/// Dense GEMV for decode: y[m, n] = Σ_k x[m, k] · W[n, k] (+ bias[n]) for m < M <= 8, W [N, K]
/// row-major in `act` (fp16/bf16), x [M, K] in `act`, y in `yt` (act or F32); fp32 accumulation. A
/// warp per row, 16-byte loads (4 in flight per lane). Returns false (nothing launched) unless
/// K % 8 == 0, M <= 8 and W, x are 16-byte aligned with ldx % 8 == 0: the caller uses cuBLAS then.
bool launch_dense_gemv(const void* W, int64_t N, int64_t K, const void* x, int M, int64_t ldx,
                       void* y, DType yt, int64_t ldy, const float* bias, DType act,
                       cudaStream_t stream);

/// Plain paged causal attention for any head_dim <= 256 and any strides (the fallback when the
/// tensor-core kernels of attention.cuh do not take the shape, e.g. the tiny test models' head_dim
/// 8/16/32): a CTA per (token, query head), keys in chunks of 128 with an online softmax in fp32
/// (Milakov & Gimelshein 2018). Token t (sequence token_seq[t], position positions[t]) attends to
/// keys 0..positions[t]; key j is at slot tables[seq * width + j / block_size] * block_size +
/// j % block_size of the caches [slots, n_kv_heads, head_dim]; GQA as backend.h. q, out, caches in
/// `act`, or with k_scale / v_scale non-null a q8_0 cache (int8 pools and fp16 scale records as
/// PagedAttentionArgs::kv_q8 describes; head_dim a multiple of 32).
void launch_attention_generic(const void* q, int64_t ldq, const void* k_cache, const void* v_cache,
                              const void* k_scale, const void* v_scale, int n_q_heads,
                              int n_kv_heads, int head_dim, int block_size, const int32_t* tables,
                              int width, const int32_t* token_seq, const int32_t* positions,
                              int n_tokens, float scale, void* out, int64_t ldo, DType act,
                              cudaStream_t stream);

}  // namespace perfx::cuda
