// Decode attention (split-KV, "flash-decoding": Dao, Haziza, Massa, Sizov 2023) and the
// paged_attention() entry point that dispatches between it and the prefill kernel.
//
// Split-KV CTA = (split, KV head, sequence): the tile kernel of attn_tile.cuh with 1 x 4 warps: the
// sequence's q_len * group (<= 16) query rows form one m16 tile that every warp holds, and the 4
// warps take 16-key quarters of each 64-key K/V tile. The KV head is therefore read from memory
// exactly once per (sequence, group), in 16-byte cp.async loads. With n_splits > 1 each CTA writes
// fp32 partials (O unnormalized, running max m in log2 units, sum l) and split_reduce_kernel (or,
// with PagedAttentionArgs::split_counters, the CTA that finishes last) merges them: m* = max m_s, O
// = sum_s 2^(m_s - m*) O_s / sum_s 2^(m_s - m*) l_s. With PagedAttentionArgs::rope the CTA also
// does RoPE + KV store for the query rows and the new keys it covers (rope_prologue in
// attn_tile.cuh): one kernel fewer per decode layer.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled (the driver's, reached through the runtime)

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "backend/cuda/attn_tile.cuh"

namespace perfx::cuda {

namespace attn_detail {
namespace {

constexpr int kSplitWM = 1, kSplitWN = 4;
constexpr int kMaxDevices = 64;

template <int D>
using SplitCfg = TileCfg<D, kSplitWM, kSplitWN>;

template <typename T, int D>
void split_init_one(int* occupancy) {
  auto* k = attn_tile_kernel<T, D, kSplitWM, kSplitWN, true>;
  const int smem = static_cast<int>(SplitCfg<D>::kSmemBytes);
  // The limit covers the fused-RoPE prologue's largest addition; occupancy is the plain kernel's.
  const int smem_max = smem + static_cast<int>(rope_smem_bytes(kSplitRows, D));
  ATTN_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  ATTN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, k, kThreads, smem));
  if constexpr (D % 32 == 0) {  // the q8_0-cache variant: same smem; the plan takes the lower
    auto* k8 = attn_tile_kernel<T, D, kSplitWM, kSplitWN, true, true>;
    ATTN_CUDA_CHECK(
        cudaFuncSetAttribute(k8, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
    int occ8 = 0;
    ATTN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ8, k8, kThreads, smem));
    *occupancy = std::min(*occupancy, occ8);
  }
}

template <typename T>
void split_init_typed(int (&occ)[4]) {
  split_init_one<T, 64>(&occ[0]);
  split_init_one<T, 80>(&occ[1]);
  split_init_one<T, 96>(&occ[2]);
  split_init_one<T, 128>(&occ[3]);
}

struct DeviceState {
  bool ready = false;
  int n_sms = 0;
  int split_occupancy[2][4] = {};  // [dtype][head_dim_index]
};

std::mutex g_mutex;
DeviceState g_state[kMaxDevices];

/// Per-device one-time setup (smem limits, SM count, occupancy); cheap after the first call.
DeviceState device_state() {
  int dev = 0;
  ATTN_CUDA_CHECK(cudaGetDevice(&dev));
  require(dev >= 0 && dev < kMaxDevices, "paged_attention: device index out of range");
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& s = g_state[dev];
  if (!s.ready) {
    ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&s.n_sms, cudaDevAttrMultiProcessorCount, dev));
    split_init_typed<__half>(s.split_occupancy[0]);
    split_init_typed<__nv_bfloat16>(s.split_occupancy[1]);
    prefill_set_attributes();
    s.ready = true;
  }
  return s;
}

/// Environment variable `name` as a whole number in [lo, hi] (`what` names it in the error), or
/// `fallback` when unset or empty; anything else throws std::invalid_argument. Callers read once.
int64_t env_count(const char* name, const char* what, int64_t lo, int64_t hi, int64_t fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  const std::string v = e;
  const bool digits = v.size() <= std::to_string(hi).size() &&
                      v.find_first_not_of("0123456789") == std::string::npos;
  const int64_t n = digits ? std::stoll(v) : -1;
  require(digits && n >= lo && n <= hi, std::string(name) + " must be " + what + " from " +
                                            std::to_string(lo) + " to " + std::to_string(hi) +
                                            ", got '" + v + "'");
  return n;
}

/// PERFX_CUDA_ATTN_SPLITS=N (1..128; read once): split-KV decode uses the largest split count
/// <= N that leaves no split empty, instead of the cost model's (a measurement knob,
/// docs/cuda_attention_notes.md).
int forced_splits() {
  static const int n =
      static_cast<int>(env_count("PERFX_CUDA_ATTN_SPLITS", "a split count", 1, kMaxSplits, 0));
  return n;
}

/// The largest n_seqs * n_kv_heads for which early_kv applies: 32 (TinyLlama's 4 and 7B's 32 at
/// batch 1 measured +8 % / neutral, 7B batch 8's 256 −1 to −3 %), or PERFX_CUDA_ATTN_EARLY_PAIRS=N
/// (0..1000000, read once; a measurement knob).
int64_t early_kv_max_pairs() {
  static const int64_t n =
      env_count("PERFX_CUDA_ATTN_EARLY_PAIRS", "a whole number", 0, 1000000, 32);
  return n;
}

/// PERFX_CUDA_ATTN_BULK=0|1 (read once; default 1): early_kv's staging as bulk copies
/// (TileArgs::early_bulk; 7B decode +1-2 %, docs/cuda_linear_notes.md §24); 0: cp.async.
bool early_bulk_enabled() {
  static const bool on = env_count("PERFX_CUDA_ATTN_BULK", "0 or 1", 0, 1, 1) != 0;
  return on;
}

/// PERFX_CUDA_ATTN_BULK_BLOCKS=0|1 (read once; default 1): early_bulk copies a whole KV block of
/// a KV head as one tensor copy where PagedAttentionArgs::kv_slots allows (docs/
/// cuda_attention_notes.md, "A block a copy"); 0: one copy a key row (the A/B arm).
bool early_bulk_blocks_enabled() {
  static const bool on = env_count("PERFX_CUDA_ATTN_BULK_BLOCKS", "0 or 1", 0, 1, 1) != 0;
  return on;
}

/// PERFX_CUDA_ATTN_MERGE_ROWS=0|1 (read once; default 1): the split-count model charges a
/// one-round split's merge per query row of a CTA (merge_charge, attn_plan.h); 0: one tile
/// whatever the rows (the A/B arm: docs/cuda_attention_notes.md, "Split counts, per row").
bool per_row_merge_enabled() {
  static const bool on = env_count("PERFX_CUDA_ATTN_MERGE_ROWS", "0 or 1", 0, 1, 1) != 0;
  return on;
}

PagedAttentionPlan plan_for(const PagedAttentionArgs& a) {
  validate(a);
  const DeviceState st = device_state();
  return make_plan(
      a, st.n_sms,
      st.split_occupancy[a.dtype == AttnDtype::kF16 ? 0 : 1][head_dim_index(a.head_dim)],
      forced_splits(), per_row_merge_enabled());
}

template <typename T, int D>
void launch_split_one(const TileArgs& t, Grid g, cudaStream_t stream) {
  auto* k = attn_tile_kernel<T, D, kSplitWM, kSplitWN, true>;
  if constexpr (D % 32 == 0) {
    if (t.k_scale) k = attn_tile_kernel<T, D, kSplitWM, kSplitWN, true, true>;
  } else {
    require(!t.k_scale, "paged_attention: a q8_0 KV cache needs head_dim 64, 96 or 128");
  }
  launch_pdl(k, dim3(g.x, g.y, g.z), dim3(kThreads),
             SplitCfg<D>::kSmemBytes + rope_smem_bytes(t.rope_tokens, D), stream, t);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int D>
void launch_reduce_one(const TileArgs& t, Grid g, cudaStream_t stream) {
  launch_pdl(split_reduce_kernel<T, D>, dim3(g.x, g.y, g.z), dim3(kThreads), 0, stream, t);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_typed(bool reduce, int head_dim, const TileArgs& t, Grid g, cudaStream_t s) {
  switch (head_dim) {
    case 64:
      return reduce ? launch_reduce_one<T, 64>(t, g, s) : launch_split_one<T, 64>(t, g, s);
    case 80:
      return reduce ? launch_reduce_one<T, 80>(t, g, s) : launch_split_one<T, 80>(t, g, s);
    case 96:
      return reduce ? launch_reduce_one<T, 96>(t, g, s) : launch_split_one<T, 96>(t, g, s);
    case 128:
      return reduce ? launch_reduce_one<T, 128>(t, g, s) : launch_split_one<T, 128>(t, g, s);
    default:
      require(false, "paged_attention: unsupported head_dim");
  }
}

/// The driver's cuTensorMapEncodeTiled (CUDA 12.0 ABI), through the runtime so that nothing links
/// libcuda directly; null where the driver does not provide it.
/// (cudaGetDriverEntryPointByVersion is CUDA 12.5's; older toolkits build without block copies.)
/// paged_attention_init() makes the first call, outside any stream capture.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
#if CUDART_VERSION >= 12050
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // the lookup's own error, at init: nothing else is pending yet
      p = nullptr;
    }
#endif
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

/// Encodes m.map from m's plain fields (KvTensorMap: 2-byte elements, no swizzle, zeros out of
/// bounds); false where the driver refuses (the caller then copies row by row).
bool encode_kv_map(KvTensorMap& m) {
  const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
  if (enc == nullptr || m.rows <= 0) return false;
  CUtensorMap map;
  static_assert(sizeof(map) == sizeof(m.map), "CUtensorMap is 128 bytes");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(m.cols), static_cast<cuuint64_t>(m.rows)};
  const cuuint64_t pitch[1] = {static_cast<cuuint64_t>(m.cols) * 2};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(m.box_cols),
                             static_cast<cuuint32_t>(m.box_rows)};
  const cuuint32_t step[2] = {1, 1};
  if (enc(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(m.base), dims, pitch, box,
          step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  std::memcpy(m.map, &map, sizeof(map));
  return true;
}

/// execute_plan() launcher for the real device.
struct CudaLauncher {
  AttnDtype dtype;
  int head_dim;
  cudaStream_t stream;
  void prefill(const TileArgs& t, Grid g) const {
    launch_prefill(dtype, head_dim, t, static_cast<int>(g.x), static_cast<int>(g.y),
                   static_cast<int>(g.z), stream);
  }
  void split(const TileArgs& t, Grid g) const {
    if (t.tmap_k.rows <= 0) return launch(false, t, g);
    TileArgs e = t;  // the views' maps encoded, or both views dropped (a copy a row)
    if (!encode_kv_map(e.tmap_k) || !encode_kv_map(e.tmap_v)) e.tmap_k.rows = e.tmap_v.rows = 0;
    launch(false, e, g);
  }
  void reduce(const TileArgs& t, Grid g) const { launch(true, t, g); }
  void launch(bool reduce, const TileArgs& t, Grid g) const {
    if (dtype == AttnDtype::kF16)
      launch_typed<__half>(reduce, head_dim, t, g, stream);
    else
      launch_typed<__nv_bfloat16>(reduce, head_dim, t, g, stream);
  }
};

}  // namespace
}  // namespace attn_detail

size_t paged_attention_workspace_bytes(int head_dim) {
  return attn_detail::workspace_bytes(head_dim);
}

size_t paged_attention_counters_bytes() {
  return attn_detail::counters_bytes();
}

PagedAttentionPlan paged_attention_plan(const PagedAttentionArgs& a) {
  return attn_detail::plan_for(a);
}

void paged_attention_init() {
  (void)attn_detail::device_state();
  (void)attn_detail::tensor_map_encoder();
}

void paged_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  using namespace attn_detail;
  const PagedAttentionPlan p = plan_for(a);
  PagedAttentionArgs b = a;
  b.early_kv = a.early_kv && pdl_early_reads() &&
               static_cast<int64_t>(a.n_seqs) * a.n_kv_heads <= early_kv_max_pairs();
  b.early_bulk = b.early_kv && early_bulk_enabled();
  if (!early_bulk_blocks_enabled()) b.kv_slots = 0;
  execute_plan(b, p, CudaLauncher{a.dtype, a.head_dim, stream});
}

PERFX_TRACE_BINDER(trace_bind_attn_decode)

}  // namespace perfx::cuda
