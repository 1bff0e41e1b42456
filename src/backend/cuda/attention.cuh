// Causal attention over a paged KV cache on CUDA (sm_80+, tuned for sm_90 / H200).
//
// Two kernels share one tile core (attn_tile.cuh): mma.sync m16n8k16 tensor-core products with an
// fp32 online softmax (FlashAttention-2, Dao 2023, arXiv 2307.08691), K/V tiles gathered through
// the block table (PagedAttention, Kwon et al. 2023, arXiv 2309.06180):
//  * split-KV ("flash-decoding", Dao et al. 2023): a CTA per (sequence, KV head, key split) holds
//    every query row of the sequence's GQA group (q_len * group <= 16 rows), so a KV head is read
//    once per group; a second small kernel merges the splits by log-sum-exp. Used for decode.
//  * prefill: a CTA per (sequence, KV head, tile of 64 query rows); rows are (token, group head)
//    pairs, so again every K/V tile serves the whole group. Causal mask on diagonal tiles only.
//
// Host plain C++ API: includable from .cpp files built by the host compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attn_common.cuh"

namespace perfx::cuda {

/// Which kernels paged_attention() may use (tests force each; the engine uses kAuto).
enum class AttnPath : int {
  kAuto = 0,         // split-KV for sequences with q_len * group <= 16, prefill for the rest
  kPrefillOnly = 1,  // the prefill kernel for every sequence
  kSplitKvOnly = 2,  // the split-KV kernel for every sequence (needs max_q_len * group <= 16)
};

/// RoPE + KV store fused into the split-KV kernel (PagedAttentionArgs::rope): the new tokens'
/// unrotated K and V and the RoPE / norm parameters, with rope_kv.cuh's RopeKvArgs meanings.
struct AttnRopeArgs {
  const void* k = nullptr;  // [n_tokens, n_kv_heads * head_dim], row stride ldk (16-byte aligned)
  int64_t ldk = 0;          // a multiple of 8
  const void* v = nullptr;  // the same layout for V
  int64_t ldv = 0;
  int rot_dim = 0;  // even, <= head_dim; 0: no rotation
  bool interleaved = false;
  const float* inv_freq = nullptr;  // [rot_dim / 2]
  float attention_factor = 1.f;
  const float* q_norm = nullptr;  // [head_dim] fp32 or null (Qwen3)
  const float* k_norm = nullptr;
  float norm_eps = 1e-6f;
};

/// Arguments of one paged_attention() call (one layer, one step). Sizes are in elements unless
/// named *_bytes. All pointers are device pointers.
///
/// Layouts (T = half or bfloat16 per `dtype`):
///  * q   [n_tokens, n_q_heads * head_dim], row stride ldq (a column view of the fused QKV output,
///        so ldq >= n_q_heads * head_dim). Query head h is columns h * head_dim + [0, head_dim).
///  * out [n_tokens, n_q_heads * head_dim], row stride ldo. Only those columns are written.
///  * k_cache, v_cache: the layer's pools [n_blocks * block_size slots, n_kv_heads, head_dim]; the
///        vector of KV head h at slot s starts at element (s * n_kv_heads + h) * head_dim.
///  * block_tables int32 [n_seqs, max_blocks]: physical block ids; key j of sequence s is at slot
///        block_tables[s][j / block_size] * block_size + j % block_size. Entries at or past
///        ceil(seq_kv_len[s] / block_size) are never read (may hold -1).
///  * seq_q_start int32 [n_seqs + 1]: sequence s owns rows [seq_q_start[s], seq_q_start[s+1]) of
///        q/out (q_len = their difference, >= 0).
///  * seq_kv_len int32 [n_seqs]: keys in the cache after this step. Row i of sequence s is the
///        token at position p = seq_kv_len[s] - q_len + i and attends to keys 0..p (causal).
///        The new tokens' K/V must already be in the cache.
///  * kv_q8 (llama.cpp's --cache-type-k/-v q8_0): k_cache / v_cache hold int8 in the layout
///        above and k_scale / v_scale fp16 [n_slots * n_kv_heads, q8_scale_stride(head_dim)]:
///        dim e of KV head h at slot s is q * scale[(s * n_kv_heads + h) * stride + e / 32]
///        (blocks of 32 along head_dim, d = max|x| / 127, as GGUF's Q8_0). head_dim 64, 96 or
///        128 here. The tile kernels stage the int8 tile and its scales with cp.async and
///        dequantize them in shared memory.
/// GQA: query head h uses KV head h / (n_q_heads / n_kv_heads).
/// out = softmax(scale * q k^T) v per query row, softmax and accumulation in fp32.
struct PagedAttentionArgs {
  AttnDtype dtype = AttnDtype::kBF16;
  bool kv_q8 = false;
  const void* k_scale = nullptr;  // kv_q8: fp16 [n_slots * n_kv_heads, q8_scale_stride]
  const void* v_scale = nullptr;
  const void* q = nullptr;
  int64_t ldq = 0;
  void* out = nullptr;
  int64_t ldo = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int n_q_heads = 0, n_kv_heads = 0;
  int head_dim = 0;    // 64, 80, 96 or 128
  int block_size = 0;  // tokens per KV block, any value >= 1 (the engine uses powers of two)
  const int32_t* block_tables = nullptr;
  int max_blocks = 0;  // block-table row width
  const int32_t* seq_q_start = nullptr;
  const int32_t* seq_kv_len = nullptr;
  int n_seqs = 0;
  int n_tokens = 0;
  /// Host upper bounds, may be bucketed (e.g. rounded up to a power of two for CUDA-graph replay);
  /// the kernels read the real lengths from seq_q_start / seq_kv_len. max_q_len must be >= every
  /// q_len (rows past it are not computed). max_kv_len only steers the split count: a sequence
  /// longer than it is still handled correctly (its last split grows), just with less parallelism.
  int max_q_len = 0;
  int max_kv_len = 0;
  float scale = 0.f;  // usually 1 / sqrt(head_dim)
  /// Split-KV partials; size from paged_attention_workspace_bytes(head_dim), 16-byte aligned.
  /// May be null when no split-KV launch needs more than one split (plan().n_splits <= 1).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  AttnPath path = AttnPath::kAuto;
  /// kAuto with max_q_len * group > 16 launches the split-KV kernel too, for the batch's short
  /// (decode) sequences. Set false when the caller knows there are none, to skip that launch.
  bool maybe_short_seqs = true;
  /// Split-KV kernel under programmatic dependent launch: read seq_q_start, seq_kv_len,
  /// block_tables and the cache rows of each sequence's keys before its first new token (keys
  /// < kv_len - q_len) before griddepcontrol.wait, so their latency overlaps the previous kernel
  /// (RoPE + KV store). Only for callers that know all of those were written before the launch's
  /// kernel chain began (by host copies or earlier steps, never by the kernel launched just
  /// before): the CUDA backend's steps. Applied when n_seqs * n_kv_heads <= 32 (more CTAs measured
  /// slower; PERFX_CUDA_ATTN_EARLY_PAIRS=N moves the limit) and not PERFX_CUDA_PDL_EARLY=0
  /// (docs/cuda_attention_notes.md).
  bool early_kv = false;
  /// With early_kv: stage those keys with one bulk (TMA) copy per key row of K and of V instead of
  /// 16-byte cp.async (sm_90+, fp16/bf16 caches; elsewhere ignored). paged_attention sets it
  /// unless PERFX_CUDA_ATTN_BULK=0 (docs/cuda_linear_notes.md §24).
  bool early_bulk = false;
  /// Slots (rows) of k_cache and v_cache: n_blocks * block_size. With early_bulk, given (> 0),
  /// a KV head's whole block of earlier keys comes as one bulk tensor copy (TMA) of K and one of
  /// V where the block size allows (attn_plan.h, kv_box_view), instead of one copy a key row;
  /// 0 (unknown): a copy a row.
  int64_t kv_slots = 0;
  /// Non-null: RoPE + KV store happen inside the split-KV kernel (decode), as rope_norm_kv_store
  /// followed by paged_attention would do them, bit for bit. q and rope->k / rope->v are then the
  /// QKV projection's unrotated output; token i of sequence s is at position seq_kv_len[s] - q_len
  /// + i; the kernel normalizes (q_norm / k_norm) and rotates q and each new token's K, writes K
  /// and V (q8: quantized) into the cache slot that the block table gives, and attends with them. q
  /// is not written (nothing else sees the rotated q). Needs every sequence on the split-KV kernel
  /// (max_q_len * group <= 16, path kAuto or kSplitKvOnly) and max_q_len >= every q_len (a
  /// sequence with more new tokens than max_q_len is skipped: its rows of out stay unwritten).
  const AttnRopeArgs* rope = nullptr;
  /// paged_attention_counters_bytes() of int32 counters, zeroed before first use and left zeroed
  /// by every call; or null. Given, the split-KV CTA that finishes last for its (sequence,
  /// KV head) merges the splits itself — the reduce kernel's arithmetic in split order, so the
  /// same bits — and no reduce kernel is launched (one kernel fewer per decode layer). Calls that
  /// share the counters must be stream-ordered (the CUDA backend's are).
  int* split_counters = nullptr;
};

/// What paged_attention() will launch for these arguments (host-only; for logs and tests).
struct PagedAttentionPlan {
  bool split_kv = false;      // split-KV kernel (+ reduce kernel when n_splits > 1)
  bool prefill = false;       // prefill kernel
  int prefill_skip_rows = 0;  // prefill skips sequences with q_len * group <= this
  int n_splits = 1;           // key splits per (sequence, KV head)
  int chunk = 0;              // keys per split (multiple of 64); the last split takes the rest
  size_t workspace_needed = 0;
};

/// Bytes of workspace any paged_attention() call with this head_dim may need (independent of the
/// batch: the split count is capped so that n_seqs * n_kv_heads * n_splits <= 2048). About 17 MB
/// for head_dim 128. Throws std::invalid_argument for an unsupported head_dim.
size_t paged_attention_workspace_bytes(int head_dim);

/// Bytes of PagedAttentionArgs::split_counters (a count per (sequence, KV head) pair that can have
/// two or more splits; 4 KB).
size_t paged_attention_counters_bytes();

/// The launch plan for `a` (validates `a` like paged_attention(); throws std::invalid_argument).
PagedAttentionPlan paged_attention_plan(const PagedAttentionArgs& a);

/// Causal paged attention for a batch of sequences (decode, prefill, chunked prefill, mixed).
/// Enqueues 1-3 kernels on `stream`; no allocation, no synchronization, no host read of device
/// data, so it can be captured in a CUDA graph (call paged_attention_init() once before capture).
/// Throws std::invalid_argument on bad arguments (unsupported head_dim, n_q_heads not a multiple
/// of n_kv_heads, misaligned pointers/strides (q, out, caches need 16-byte alignment, ldq/ldo
/// multiples of 8), workspace too small) and std::runtime_error if a launch fails.
void paged_attention(const PagedAttentionArgs& a, cudaStream_t stream);

/// Sets the kernels' shared-memory limits and caches the device's SM count and occupancy for the
/// current device. Called implicitly by the first paged_attention(); call it explicitly before
/// capturing a CUDA graph. Throws std::runtime_error on CUDA errors.
void paged_attention_init();

}  // namespace perfx::cuda
