// Internal to the CUDA attention kernels: the host-side plan of a paged_attention() call (argument
// checks, split count, kernel parameters, launch order), kept free of CUDA device code so that the
// CPU emulation test (tests/cuda/attn_emulation_test.cpp) runs exactly this logic too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "backend/cuda/attention.cuh"

namespace perfx::cuda::attn_detail {

constexpr int kThreads = 128;        // 4 warps per CTA (all attention kernels)
constexpr int kTileKeys = 64;        // keys per pipeline stage
constexpr int kStages = 2;           // cp.async double buffer
constexpr int kSplitRows = 16;       // rows of a split-KV CTA: q_len * group <= 16
constexpr int kPrefillRows = 64;     // rows of a prefill CTA (4 warps x 16)
constexpr int kMaxSplitCtas = 2048;  // n_seqs * n_kv_heads * n_splits cap (bounds the workspace)
constexpr int kMaxSplits = 128;
constexpr float kLog2e = 1.4426950408889634f;
// Split-count cost model, in units of "one 64-key tile streamed by one resident CTA".
constexpr double kCtaOverheadTiles = 1.0;  // prologue (Q, first-load latency) + merge + write
constexpr double kReduceTiles = 1.0;       // merging the splits (last CTA or reduce launch)
constexpr int kMergeRowsPerTile = 8;       // rows a CTA merges for kReduceTiles (merge_charge)

/// A 2-D view of one KV cache (K or V) for bulk tensor copies (TMA; PTX ISA 8.0,
/// "cp.async.bulk.tensor", "Tensor Maps"): rows = cache slots, cols = n_kv_heads * head_dim
/// elements of 2 bytes (row pitch cols * 2 bytes). One copy moves a box of box_rows slots (a KV
/// block) x box_cols = head_dim + 8 elements (a KV head's row and the tile's 8-element pad, so the
/// box lands at the shared-memory tile's row stride; past the last head's row the box reads zeros,
/// never the next slot). rows = 0: no view (the kernel copies row by row).
struct alignas(64) KvTensorMap {
  unsigned char map[128];  // its CUtensorMap (encoded on the host by the CUDA launcher)
  const void* base;        // the cache's first element (the CPU emulator copies from these fields)
  int64_t rows, cols;
  int box_rows, box_cols;
};

/// Kernel parameters (by value). Sizes in elements.
struct TileArgs {
  const void* q;
  int64_t ldq;
  void* out;
  int64_t ldo;
  const void* k_cache;
  const void* v_cache;
  const void* k_scale;  // kv_q8: fp16 per 32 cache elements (else null)
  const void* v_scale;
  const int32_t* block_tables;
  int max_blocks;
  const int32_t* seq_q_start;
  const int32_t* seq_kv_len;
  int n_kv_heads;
  int group;  // n_q_heads / n_kv_heads
  int block_size;
  float scale_log2;  // scale * log2(e): softmax in base 2
  int skip_rows;     // prefill: sequences with q_len * group <= skip_rows are left to split-KV
  int n_splits;      // split-KV: split s covers [s*chunk, (s+1)*chunk), the last one up to kv_len
  int chunk;
  float* ws_o;     // [n_seqs, n_kv_heads, kSplitRows, n_splits, D] unnormalized partial O
  float* ws_ml;    // [n_seqs, n_kv_heads, kSplitRows, n_splits, 2] (max in log2 units, sum)
  int early_kv;    // split-KV: stage the keys before the first new token before the PDL wait
  int early_bulk;  // early_kv's staging as bulk copies (sm_90; fp16/bf16 caches), not cp.async
  // early_bulk with PagedAttentionArgs::kv_slots: a whole KV block of earlier keys as one tensor
  // copy of K and one of V (kv_box_view(); tmap_k.rows = 0: one copy a key row).
  KvTensorMap tmap_k, tmap_v;
  // Fused RoPE + KV store (split-KV only; PagedAttentionArgs::rope): rope_tokens > 0 turns it on
  // and sizes the dynamic shared memory after the tile's (rope_smem_bytes).
  int rope_tokens;
  const void* k_new;
  int64_t ldk_new;
  const void* v_new;
  int64_t ldv_new;
  const float* inv_freq;
  const float* q_norm;
  const float* k_norm;
  float rope_af, norm_eps;
  int rot_dim, rope_interleaved;
  // Split-KV with n_splits > 1: the last CTA of each (sequence, KV head) merges the splits
  // (PagedAttentionArgs::split_counters); null: the reduce kernel does.
  int* counters;
};

/// Dynamic shared memory the fused RoPE prologue adds after the tile kernel's: per new token, its
/// cos / sin table (head_dim fp32: cos in the first half, sin in the second) and its raw K and V
/// rows (2 * head_dim of T).
inline size_t rope_smem_bytes(int rope_tokens, int head_dim) {
  return static_cast<size_t>(rope_tokens) * head_dim * (sizeof(float) + 2 * 2);
}

inline int head_dim_index(int d) {
  switch (d) {
    case 64:
      return 0;
    case 80:
      return 1;
    case 96:
      return 2;
    case 128:
      return 3;
    default:
      return -1;
  }
}

/// paged_attention_workspace_bytes(): the split-KV partials of kMaxSplitCtas CTAs of kSplitRows.
inline size_t workspace_bytes(int head_dim) {
  require(head_dim_index(head_dim) >= 0,
          "paged_attention_workspace_bytes: unsupported head_dim " + std::to_string(head_dim));
  return static_cast<size_t>(kMaxSplitCtas) * kSplitRows * (head_dim + 2) * sizeof(float);
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/// paged_attention_counters_bytes(): a counter per pair with two or more splits.
inline size_t counters_bytes() {
  return static_cast<size_t>(kMaxSplitCtas / 2) * sizeof(int);
}

/// Throws std::invalid_argument unless `a` satisfies PagedAttentionArgs' contract (as far as the
/// host can tell without reading device memory).
inline void validate(const PagedAttentionArgs& a) {
  const std::string f = "paged_attention: ";
  require(a.dtype == AttnDtype::kF16 || a.dtype == AttnDtype::kBF16, f + "bad dtype");
  require(head_dim_index(a.head_dim) >= 0,
          f + "unsupported head_dim " + std::to_string(a.head_dim) + " (64, 80, 96, 128)");
  require(a.n_kv_heads >= 1 && a.n_kv_heads <= 65535, f + "n_kv_heads out of range");
  require(a.n_q_heads >= a.n_kv_heads && a.n_q_heads % a.n_kv_heads == 0,
          f + "n_q_heads must be a positive multiple of n_kv_heads");
  require(a.n_seqs >= 0 && a.n_seqs <= 65535, f + "n_seqs out of range (0..65535)");
  require(a.n_tokens >= 0 && a.max_q_len >= 0 && a.max_kv_len >= 0 && a.kv_slots >= 0,
          f + "negative size");
  require(a.block_size < 1 || a.kv_slots % a.block_size == 0,
          f + "kv_slots " + std::to_string(a.kv_slots) + " is not whole blocks of " +
              std::to_string(a.block_size) + " (n_blocks * block_size, or 0)");
  if (a.n_seqs == 0 || a.max_q_len == 0) return;
  require(a.block_size >= 1, f + "block_size must be >= 1");
  require(a.max_blocks >= 1, f + "max_blocks must be >= 1");
  require(a.q && a.out && a.k_cache && a.v_cache && a.block_tables && a.seq_q_start && a.seq_kv_len,
          f + "null pointer");
  require(aligned16(a.q) && aligned16(a.out) && aligned16(a.k_cache) && aligned16(a.v_cache),
          f + "q, out, k_cache, v_cache must be 16-byte aligned");
  const int64_t width = static_cast<int64_t>(a.n_q_heads) * a.head_dim;
  require(a.ldq % 8 == 0 && a.ldq >= width, f + "ldq must be a multiple of 8 and >= width");
  require(a.ldo % 8 == 0 && a.ldo >= width, f + "ldo must be a multiple of 8 and >= width");
  require(std::isfinite(a.scale), f + "scale must be finite");
  require((reinterpret_cast<uintptr_t>(a.split_counters) & 3u) == 0,
          f + "split_counters must be 4-byte aligned");
  require(!a.kv_q8 || (a.head_dim % 32 == 0 && a.k_scale && a.v_scale),
          f + "a q8_0 KV cache needs head_dim 64, 96 or 128 and both scale arrays");
  require(!a.kv_q8 ||
              ((reinterpret_cast<uintptr_t>(a.k_scale) | reinterpret_cast<uintptr_t>(a.v_scale)) &
               7u) == 0,
          f + "k_scale, v_scale must be 8-byte aligned");
  const int64_t rows = static_cast<int64_t>(a.max_q_len) * (a.n_q_heads / a.n_kv_heads);
  require((rows + kPrefillRows - 1) / kPrefillRows <= std::numeric_limits<int>::max(),
          f + "max_q_len too large");
  if (a.rope != nullptr) {
    const AttnRopeArgs& r = *a.rope;
    const int64_t kv_width = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
    require(rows <= kSplitRows && a.path != AttnPath::kPrefillOnly,
            f + "fused RoPE needs every sequence on the split-KV kernel (max_q_len * group <= " +
                std::to_string(kSplitRows) + ")");
    require(r.k && r.v && aligned16(r.k) && aligned16(r.v),
            f + "fused RoPE: k, v must be non-null and 16-byte aligned");
    require(r.ldk % 8 == 0 && r.ldk >= kv_width && r.ldv % 8 == 0 && r.ldv >= kv_width,
            f + "fused RoPE: ldk, ldv must be multiples of 8 and >= n_kv_heads * head_dim");
    require(r.rot_dim >= 0 && r.rot_dim % 2 == 0 && r.rot_dim <= a.head_dim,
            f + "fused RoPE: rot_dim must be even and <= head_dim");
    require(r.rot_dim == 0 || r.inv_freq, f + "fused RoPE: null inv_freq");
  }
}

/// The merge's charge in choose_splits' units for s > 1 splits of split-KV CTAs of `rows` query
/// rows (max_q_len * group; below 1 counts as 1) that take `rounds` rounds of the resident CTA
/// slots: kReduceTiles, or with `per_row` and one round kReduceTiles * min(1, rows /
/// kMergeRowsPerTile). The merge reads, rescales and sums each row's partials, so a one-row CTA
/// (Llama-2-7B, no GQA) merges an eighth of what an eight-row one (TinyLlama's group of 8) does;
/// where the splits need a second round the step reads enough keys to be bound by DRAM, not by a
/// CTA's latency, and the merge's traffic costs in full. An empirical fit, not a model of the
/// kernel (whose last-CTA merge gives each row a warp, so 1-4 rows may cost alike; the reduce
/// launch of PERFX_CUDA_ATTN_MERGE=0 gets the same charge): H200, Llama-2-7B batch 8 at 321-512
/// keys lost 2 % at 3 splits; the one-round choices it makes gained up to 3.9 %
/// (docs/cuda_attention_notes.md, "Split counts, per row").
inline double merge_charge(int rows, int64_t rounds, bool per_row) {
  if (!per_row || rounds != 1) return kReduceTiles;
  return kReduceTiles * std::min(1.0, static_cast<double>(std::max(rows, 1)) / kMergeRowsPerTile);
}

/// Picks the split count minimizing rounds(s) * (tiles per split + overhead) (+ the merge's
/// charge, merge_charge(rows, rounds(s), per_row_merge), where s > 1), where rounds(s) =
/// ceil(pairs * s / resident CTA slots). Only s whose splits are all non-empty at max_kv_len are
/// considered; pairs * s <= kMaxSplitCtas bounds the workspace; the default rows (kSplitRows)
/// charge a whole tile. force > 0: the largest such
/// s <= force instead (PERFX_CUDA_ATTN_SPLITS, a measurement knob).
inline void choose_splits(int64_t pairs, int max_kv_len, int n_sms, int occupancy, int* n_splits,
                          int* chunk, int force = 0, int rows = kSplitRows,
                          bool per_row_merge = true) {
  const int tiles = std::max(1, (std::max(max_kv_len, 1) + kTileKeys - 1) / kTileKeys);
  const int64_t cap = std::max<int64_t>(1, kMaxSplitCtas / std::max<int64_t>(pairs, 1));
  const int s_max = static_cast<int>(std::min<int64_t>({kMaxSplits, tiles, cap}));
  const int64_t slots = std::max<int64_t>(1, static_cast<int64_t>(n_sms) * std::max(occupancy, 1));
  int best = 1;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int s = 1; s <= s_max; ++s) {
    const int per = (tiles + s - 1) / s;
    if ((tiles + per - 1) / per != s) continue;  // would leave an empty split
    const int64_t rounds = (pairs * s + slots - 1) / slots;
    const double cost = force > 0 ? (s <= force ? -s : 0.0)
                                  : static_cast<double>(rounds) * (per + kCtaOverheadTiles) +
                                        (s > 1 ? merge_charge(rows, rounds, per_row_merge) : 0.0);
    if (cost < best_cost) {
      best_cost = cost;
      best = s;
    }
  }
  *n_splits = best;
  *chunk = ((tiles + best - 1) / best) * kTileKeys;
}

/// The plan for validated arguments, given the device's SM count and the split-KV kernel's
/// resident CTAs per SM (force_splits > 0: choose_splits' force; per_row_merge: its merge
/// charge per query row).
inline PagedAttentionPlan make_plan(const PagedAttentionArgs& a, int n_sms, int split_occupancy,
                                    int force_splits = 0, bool per_row_merge = true) {
  PagedAttentionPlan p;
  if (a.n_seqs == 0 || a.max_q_len == 0) return p;
  const int G = a.n_q_heads / a.n_kv_heads;
  const bool all_short = static_cast<int64_t>(a.max_q_len) * G <= kSplitRows;
  switch (a.path) {
    case AttnPath::kAuto:
      if (all_short) {
        p.split_kv = true;
      } else {
        p.prefill = true;
        if (G <= kSplitRows && a.maybe_short_seqs) {
          p.prefill_skip_rows = kSplitRows;
          p.split_kv = true;
        }
      }
      break;
    case AttnPath::kPrefillOnly:
      p.prefill = true;
      break;
    case AttnPath::kSplitKvOnly:
      require(all_short, "paged_attention: kSplitKvOnly needs max_q_len * group <= 16");
      p.split_kv = true;
      break;
    default:
      require(false, "paged_attention: bad path");
  }
  if (p.split_kv) {
    const int64_t pairs = static_cast<int64_t>(a.n_seqs) * a.n_kv_heads;
    // rows: the step's longest query times the group, capped (a mixed step's prefill rows, past
    // kSplitRows, charge a whole tile like any CTA of 8 or more rows)
    const int rows =
        static_cast<int>(std::min<int64_t>(static_cast<int64_t>(a.max_q_len) * G, kSplitRows));
    choose_splits(pairs, a.max_kv_len, n_sms, split_occupancy, &p.n_splits, &p.chunk, force_splits,
                  rows, per_row_merge);
    if (p.n_splits > 1)
      p.workspace_needed =
          static_cast<size_t>(pairs) * kSplitRows * p.n_splits * (a.head_dim + 2) * sizeof(float);
  }
  return p;
}

struct Grid {
  unsigned x, y, z;
};

/// The KvTensorMap of `cache` for early_bulk's block copies (without its encoded map), or one
/// with rows = 0 where they do not apply: kv_slots unknown (0) or past int32 coordinates, a q8
/// cache, or a block that does not tile the 64-key stage in 128-byte-aligned pieces (block_size
/// must divide 64, and a block of (head_dim + 8)-element rows must span a multiple of 128 bytes:
/// block_size >= 8 for every supported head_dim; TMA destinations are 128-byte aligned).
inline KvTensorMap kv_box_view(const PagedAttentionArgs& a, const void* cache) {
  KvTensorMap m{};
  const int64_t box_bytes = static_cast<int64_t>(a.block_size) * (a.head_dim + 8) * 2;
  if (a.kv_q8 || a.kv_slots <= 0 || a.kv_slots > std::numeric_limits<int32_t>::max() ||
      a.block_size < 2 || kTileKeys % a.block_size != 0 || box_bytes % 128 != 0 ||
      !aligned16(cache))
    return m;
  m.base = cache;
  m.rows = a.kv_slots;
  m.cols = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  m.box_rows = a.block_size;
  m.box_cols = a.head_dim + 8;
  return m;
}

/// Issues the plan's launches through `L`, which provides prefill(const TileArgs&, Grid),
/// split(const TileArgs&, Grid) and reduce(const TileArgs&, Grid) (all with kThreads threads).
/// Order: prefill, split-KV, reduce (the two main kernels write disjoint rows of out).
template <typename Launcher>
void execute_plan(const PagedAttentionArgs& a, const PagedAttentionPlan& p, Launcher&& L) {
  if (!p.split_kv && !p.prefill) return;
  const int G = a.n_q_heads / a.n_kv_heads;
  TileArgs t{};
  t.q = a.q;
  t.ldq = a.ldq;
  t.out = a.out;
  t.ldo = a.ldo;
  t.k_cache = a.k_cache;
  t.v_cache = a.v_cache;
  t.k_scale = a.kv_q8 ? a.k_scale : nullptr;
  t.v_scale = a.kv_q8 ? a.v_scale : nullptr;
  t.block_tables = a.block_tables;
  t.max_blocks = a.max_blocks;
  t.seq_q_start = a.seq_q_start;
  t.seq_kv_len = a.seq_kv_len;
  t.n_kv_heads = a.n_kv_heads;
  t.group = G;
  t.block_size = a.block_size;
  t.scale_log2 = a.scale * kLog2e;
  t.skip_rows = p.prefill_skip_rows;
  t.n_splits = p.n_splits;
  t.chunk = p.chunk;
  t.ws_o = nullptr;
  t.ws_ml = nullptr;
  t.early_kv = a.early_kv ? 1 : 0;
  t.early_bulk = a.early_kv && a.early_bulk ? 1 : 0;
  if (t.early_bulk) {
    t.tmap_k = kv_box_view(a, a.k_cache);
    t.tmap_v = kv_box_view(a, a.v_cache);
  }
  t.rope_tokens = 0;
  if (a.rope != nullptr) {  // validate() has checked that only the split-KV kernel runs
    const AttnRopeArgs& r = *a.rope;
    t.rope_tokens = std::max(a.max_q_len, 1);
    t.k_new = r.k;
    t.ldk_new = r.ldk;
    t.v_new = r.v;
    t.ldv_new = r.ldv;
    t.inv_freq = r.inv_freq;
    t.q_norm = r.q_norm;
    t.k_norm = r.k_norm;
    t.rope_af = r.attention_factor;
    t.norm_eps = r.norm_eps;
    t.rot_dim = r.rot_dim;
    t.rope_interleaved = r.interleaved ? 1 : 0;
  }
  if (p.split_kv && p.n_splits > 1) {  // checked before anything is launched
    require(
        a.workspace != nullptr && aligned16(a.workspace) && a.workspace_bytes >= p.workspace_needed,
        "paged_attention: workspace missing, misaligned or smaller than " +
            std::to_string(p.workspace_needed) + " bytes (paged_attention_workspace_bytes)");
    t.ws_o = static_cast<float*>(a.workspace);
    t.ws_ml = t.ws_o +
              static_cast<int64_t>(a.n_seqs) * a.n_kv_heads * kSplitRows * p.n_splits * a.head_dim;
  }
  const unsigned kvh = static_cast<unsigned>(a.n_kv_heads), seqs = static_cast<unsigned>(a.n_seqs);
  if (p.prefill) {
    const int64_t rows = static_cast<int64_t>(a.max_q_len) * G;
    L.prefill(t, Grid{static_cast<unsigned>((rows + kPrefillRows - 1) / kPrefillRows), kvh, seqs});
  }
  if (p.split_kv) {
    t.counters = p.n_splits > 1 ? a.split_counters : nullptr;
    L.split(t, Grid{static_cast<unsigned>(p.n_splits), kvh, seqs});
    if (p.n_splits > 1 && t.counters == nullptr) L.reduce(t, Grid{kvh, seqs, 1u});
  }
}

}  // namespace perfx::cuda::attn_detail
