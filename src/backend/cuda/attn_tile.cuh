// Internal to the CUDA attention kernels (attention_decode.cu, attention_prefill.cu): the shared
// tile kernel, its device helpers and the host-side launch hooks between the two files.
//
// One CTA = 4 warps computes attention for a tile of "rows" of one (sequence, KV head): a row is a
// (new token i, head g of the GQA group) pair, row index r = i * group + g, so every K/V tile that
// the CTA stages in shared memory serves all query heads of the group. Warps are arranged WM x WN:
// WM groups of 16 rows (the m16 of mma.m16n8k16) times WN slices of each 64-key tile. Per tile and
// warp (FlashAttention-2, Dao 2023, arXiv 2307.08691, Algorithm 1):
//   S = Q K^T (mma, fp32 accumulate) -> scale, causal/end mask -> online softmax in fp32
//   (running max m, running sum l, O rescaled by exp2(m_old - m_new)) -> O += P V (P rounded to T).
// K/V tiles are gathered slot by slot through the block table (PagedAttention, arXiv 2309.06180)
// with 16-byte cp.async into a 2-stage ring (the split-KV kernel's keys of earlier steps, staged
// before its PDL wait: on sm_90 one tensor copy a whole KV block, else one bulk copy a row,
// TileArgs::early_bulk); keys past the CTA's range are zero-filled (never read). At the end each
// warp's (O, m, l) goes to shared memory; the WN slices are merged by log-sum-exp and written
// either normalized to `out` (T) or, for split-KV with n_splits > 1, as fp32 partials
// (unnormalized O, m, l) that split_reduce_kernel — or, with split counters, the split that
// finishes last — merges across splits (flash-decoding).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", f16/bf16): lane = 4 * g + t
//   A 16x16 (row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1],
//                        a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9]
//   B 16x8 (k x n):      b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C 16x8 (fp32):       c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// ldmatrix.x4 gives lane l the fragment of matrix j in register j from the 8 row addresses of
// lanes 8j..8j+7; .trans transposes each 8x8 matrix (used for V, stored [key][dim]).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/attn_plan.h"
#include "backend/cuda/cvt.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_head.cuh"

namespace perfx::cuda::attn_detail {

template <int D, int WM, int WN>
struct TileCfg {
  static_assert(D % 16 == 0 && D >= 16 && D <= 128, "head_dim must be a multiple of 16, <= 128");
  static_assert(WM * WN * 32 == kThreads, "4 warps");
  static constexpr int kRows = 16 * WM;       // query rows per CTA
  static constexpr int kKW = kTileKeys / WN;  // keys per warp per tile
  static_assert(kKW % 16 == 0, "a warp's key slice must be a multiple of 16");
  static constexpr int kStride = D + 8;  // smem row stride (elements): an odd number of 16-B units,
                                         // so ldmatrix's 8 row addresses hit distinct banks
  static constexpr int kChunks = D / 8;  // 16-byte chunks per head vector
  static constexpr int kOStride = D + 8;  // fp32 merge buffer row stride
  static constexpr int kQElems = kRows * kStride;
  static constexpr int kKvElems = kTileKeys * kStride;  // one stage of K (or of V)
  static constexpr size_t kQBytes = size_t(kQElems) * 2;
  static constexpr size_t kKvBytes = size_t(2 * kStages * kKvElems) * 2;
  static constexpr size_t kMergeBytes = size_t(WN * kRows * (kOStride + 2)) * 4;
  static constexpr size_t kSmemBytes = kQBytes + (kKvBytes > kMergeBytes ? kKvBytes : kMergeBytes);
  static constexpr int kKvIters = kTileKeys * kChunks / kThreads;
  static_assert(kKvIters * kThreads == kTileKeys * kChunks, "K/V tile chunks per thread");
  // q8_0 cache (kQ8): one converted T stage of K and of V, then kStages raw stages, each
  // [K: 64 int8 rows of D][K: 64 scale records of 8 bytes][V: the same] (q8_scale_stride 4).
  static constexpr int kRawHalf = kTileKeys * (D + 8);
  static constexpr int kRawStage = 2 * kRawHalf;
  static constexpr int kRawIters = kTileKeys * (D / 16) / kThreads;  // 16-byte copies per thread
  static constexpr size_t kQ8KvBytes = size_t(2 * kKvElems) * 2 + size_t(kStages) * kRawStage;
  static_assert(kQ8KvBytes <= kKvBytes, "the q8 staging fits in the fp16 ring's space");
  static_assert(kQBytes % 16 == 0 && (kKvElems * 2) % 16 == 0, "16-byte aligned smem regions");
};

// ---------------------------------------------------------------------------------------------
// Device helpers

template <typename T>
struct TypeOps;

template <>
struct TypeOps<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
  }
};

template <>
struct TypeOps<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
  }
};

#if !defined(PERFX_ATTN_EMULATION)  // the CPU emulator (tests/cuda) supplies its own versions

/// d += a * b for one m16n8k16 tile, fp32 accumulate.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

/// 16-byte global->shared async copy; src_bytes = 0 zero-fills the destination and reads nothing
/// (src must still be a valid global address).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

/// 8-byte variant (cp.async.ca: .cg takes 16 bytes only); same zero-fill rule.
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Waits until at most N of this thread's committed cp.async groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Bulk (TMA) copies that complete on an mbarrier (PTX ISA 8.0, "cp.async.bulk", "mbarrier";
// sm_90+). The kernel uses them only where kHasBulkCopy; the sm_80 build keeps cp.async.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kHasBulkCopy = true;
#else
constexpr bool kHasBulkCopy = false;
#endif

/// Initializes the mbarrier at `bar` (shared, 8-byte aligned) for `count` arrivals a phase and
/// makes the initialization visible to the async proxy (before any bulk copy names it).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// One arrival on `bar` that also expects `bytes` more transaction bytes in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
#endif
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared
/// memory; completion counts `bytes` against `bar`'s transaction count.
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, unsigned bytes,
                                              uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_u32(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
#endif
}

/// Copies the box of the 2-D tensor map `m` at (column c0, row c1) — m.box_rows rows of
/// m.box_cols 2-byte elements, packed at m.box_cols elements a row — to `smem` (128-byte
/// aligned); completion counts box_rows * box_cols * 2 bytes (elements past the view's columns
/// read as zeros and count too) against `bar`. `m` must live in kernel-parameter space
/// (__grid_constant__) or global memory.
__device__ __forceinline__ void tma_load_2d(void* smem, const KvTensorMap& m, int c0, int c1,
                                            uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_u32(smem)),
      "l"(reinterpret_cast<uint64_t>(m.map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
#endif
}

/// Waits until the phase of `bar` with the given parity has completed (its arrivals and bytes).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

#endif  // !PERFX_ATTN_EMULATION

// ---------------------------------------------------------------------------------------------
// The tile kernel. kSplit: grid (n_splits, n_kv_heads, n_seqs), rows = all q_len*group (<= 16)
// rows of the sequence, keys = the split's range. Otherwise (prefill): grid (row tiles, n_kv_heads,
// n_seqs), rows = one tile of 16*WM rows (x reversed: the last, longest tiles start first), keys =
// 0 .. position of the tile's last token.

/// 8 int8 cache values (q) times their block's scale d -> 8 T values packed in 16 bytes (the
/// smem image of an fp16/bf16 chunk). The product is formed in fp32, then rounded to T once.
template <typename T>
__device__ __forceinline__ uint4 dequant_q8x8(uint2 q, float d) {
  float f[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[i] = static_cast<float>(static_cast<int8_t>(q.x >> (8 * i))) * d;
    f[4 + i] = static_cast<float>(static_cast<int8_t>(q.y >> (8 * i))) * d;
  }
  uint4 u;
  u.x = TypeOps<T>::pack(f[0], f[1]);
  u.y = TypeOps<T>::pack(f[2], f[3]);
  u.z = TypeOps<T>::pack(f[4], f[5]);
  u.w = TypeOps<T>::pack(f[6], f[7]);
  return u;
}

/// The fused RoPE + KV store of a split-KV CTA (TileArgs::rope_tokens), after its Q group (raw q
/// rows in sQ, raw new K / V rows in s_new) has landed: a warp per item rotates (and normalizes)
/// the G * q_len query rows in place, and rotates each new key's K row, writing K and V to the
/// cache slot slot_of(j) gives and, for keys in the ring's first kStages tiles, into the stage row
/// the key loop would have loaded (q8: int8 + scale, the bytes stored). Keys without a slot get
/// the zeros a load would have filled. rope_kv.cu's formulas through rope_head.cuh, bit for bit.
template <typename T, int D, int WM, int WN, bool kQ8, typename SlotOf>
__device__ __forceinline__ void rope_prologue(const TileArgs& a, T* sQ, T* sK, T* sV,
                                              unsigned char* sRaw, const float* s_cs,
                                              const T* s_new, int rows_total, int new_lo,
                                              int new_hi, int k_begin, int ctx, int kvh,
                                              SlotOf&& slot_of) {
  using C = TileCfg<D, WM, WN>;
  using rope_detail::HeadRope;
  using rope_detail::norm_rope_head;
  constexpr int kPL = (D + 31) / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = a.group;
  const int n_new = max(0, new_hi - new_lo);
  const int64_t slot_stride = static_cast<int64_t>(a.n_kv_heads) * D;
  // New token i's RoPE (its cos / sin rows of the table) with norm weight w.
  auto head_rope = [&](int i, const float* w) {
    return HeadRope{D, a.rot_dim, a.rope_interleaved != 0, s_cs + i * D, s_cs + i * D + D / 2,
                    w, a.norm_eps};
  };
  for (int it = warp; it < rows_total + 2 * n_new; it += kThreads / 32) {
    float x[kPL];
    if (it < rows_total) {  // query row it = (token i, head g of the group), in place
      T* row = sQ + it * C::kStride;
      norm_rope_head<T>(row, head_rope(it / G, a.q_norm), lane, x);
      __syncwarp();  // every lane has read its partners before any lane overwrites the row
#pragma unroll
      for (int j = 0; j < kPL; ++j)
        if (lane + 32 * j < D) row[lane + 32 * j] = from_f<T>(x[j]);
      continue;
    }
    const int kv = it - rows_total, is_v = kv & 1, key = new_lo + (kv >> 1), i = key - ctx;
    const T* src = s_new + (2 * i + is_v) * D;
    const int64_t slot = slot_of(key);
    const int tile = (key - k_begin) / kTileKeys, row = key - k_begin - tile * kTileKeys;
    const bool staged = tile < kStages;
    const int64_t at = slot * slot_stride + static_cast<int64_t>(kvh) * D;
    if (!kQ8 && is_v) {  // V into a T cache: the raw bits, as rope_kv.cu copies them
      T* g = slot < 0 ? nullptr : const_cast<T*>(static_cast<const T*>(a.v_cache)) + at;
      T* sm = staged ? sV + tile * C::kKvElems + row * C::kStride : nullptr;
      for (int e = lane; e < D; e += 32) {
        const T y = slot < 0 ? from_f<T>(0.f) : src[e];
        if (g) g[e] = y;
        if (sm) sm[e] = y;
      }
      continue;
    }
    if (is_v) {
#pragma unroll
      for (int j = 0; j < kPL; ++j) x[j] = lane + 32 * j < D ? to_f<T>(src[lane + 32 * j]) : 0.f;
    } else {
      norm_rope_head<T>(src, head_rope(i, a.k_norm), lane, x);
    }
    if (slot < 0) {
#pragma unroll
      for (int j = 0; j < kPL; ++j) x[j] = 0.f;
    }
    if constexpr (kQ8) {
      int8_t* gq =
          slot < 0
              ? nullptr
              : const_cast<int8_t*>(static_cast<const int8_t*>(is_v ? a.v_cache : a.k_cache)) + at;
      __half* gd =
          slot < 0 ? nullptr
                   : const_cast<__half*>(static_cast<const __half*>(is_v ? a.v_scale : a.k_scale)) +
                         (slot * a.n_kv_heads + kvh) * q8_scale_stride(D);
      unsigned char* rs = sRaw + tile * C::kRawStage + (is_v ? C::kRawHalf : 0);
      rope_detail::store_q8(
          x, D, lane, gq, gd, staged ? reinterpret_cast<int8_t*>(rs + row * D) : nullptr,
          staged ? reinterpret_cast<__half*>(rs + kTileKeys * D + row * 8) : nullptr);
    } else {
      T* g = slot < 0 ? nullptr
                      : const_cast<T*>(static_cast<const T*>(is_v ? a.v_cache : a.k_cache)) + at;
      T* sm = staged ? (is_v ? sV : sK) + tile * C::kKvElems + row * C::kStride : nullptr;
#pragma unroll
      for (int j = 0; j < kPL; ++j) {
        const int e = lane + 32 * j;
        if (e >= D) continue;
        const T y = from_f<T>(x[j]);
        if (g) g[e] = y;
        if (sm) sm[e] = y;
      }
    }
  }
}

/// Splits the split-KV kernel ran for a sequence of kv_len keys: split 0 always (it writes zeros
/// when there is no key: bad input), split s > 0 iff s * chunk < kv_len (the same rule there). The
/// split counters count exactly these CTAs, so bad input cannot leave a counter behind.
__device__ __forceinline__ int valid_splits(const TileArgs& a, int kv_len) {
  return kv_len <= 0 ? 1 : min(a.n_splits, (kv_len + a.chunk - 1) / a.chunk);
}

/// Merges the n_valid splits of one (sequence, KV head) from the workspace into out: a warp per
/// query row, lanes over head dims; split order fixed, so whichever CTA runs it writes the same
/// bits. Partials are read through L2 (__ldcg): other CTAs of the same kernel may have written
/// them (the last-CTA merge).
template <typename T, int D>
__device__ __forceinline__ void merge_splits(const TileArgs& a, int seq, int kvh, int q0,
                                             int rows_total, int n_valid) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = a.group;
  constexpr int kPerLane = (D + 31) / 32;
  for (int r = warp; r < rows_total; r += kThreads / 32) {
    const int64_t idx0 =
        ((static_cast<int64_t>(seq) * a.n_kv_heads + kvh) * kSplitRows + r) * a.n_splits;
    float mmax = -INFINITY;
    for (int s = 0; s < n_valid; ++s) mmax = fmaxf(mmax, __ldcg(a.ws_ml + (idx0 + s) * 2));
    float L = 0.f;
    float acc[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) acc[k] = 0.f;
    for (int s = 0; s < n_valid; ++s) {
      const float m = __ldcg(a.ws_ml + (idx0 + s) * 2);
      const float f = m == -INFINITY ? 0.f : exp2f(m - mmax);
      L += f * __ldcg(a.ws_ml + (idx0 + s) * 2 + 1);
      const float* po = a.ws_o + (idx0 + s) * D;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int d = lane + 32 * k;
        if (d < D) acc[k] += f * __ldcg(po + d);
      }
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    const int i = r / G, g = r - i * G;
    T* dst = static_cast<T*>(a.out) + static_cast<int64_t>(q0 + i) * a.ldo +
             static_cast<int64_t>(kvh * G + g) * D;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) dst[d] = from_f<T>(acc[k] * inv);
    }
  }
}

// kQ8: the cache holds int8 with an fp16 scale per 32 elements (TileArgs::k_scale / v_scale).
// The raw int8 rows and scale records go through the same cp.async double buffer; once a tile
// has landed, the CTA dequantizes it into one T stage of K and V, so everything after that is the
// fp16/bf16 kernel (one more barrier per tile).
template <typename T, int D, int WM, int WN, bool kSplit, bool kQ8 = false>
__global__ void __launch_bounds__(kThreads) attn_tile_kernel(__grid_constant__ const TileArgs a) {
  PERFX_TRACE(kTrAttn, a.k_cache);
  using C = TileCfg<D, WM, WN>;
  using Ops = TypeOps<T>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = reinterpret_cast<T*>(smem_raw + C::kQBytes);
  T* sV = sK + (kQ8 ? 1 : kStages) * C::kKvElems;
  unsigned char* sRaw = reinterpret_cast<unsigned char*>(sV + C::kKvElems);  // kQ8 only
  // Merge buffers alias the K/V ring (used only after the key loop has drained).
  float* sO = reinterpret_cast<float*>(smem_raw + C::kQBytes);
  float* sM = sO + WN * C::kRows * C::kOStride;
  float* sL = sM + WN * C::kRows;
  // PDL: the split-KV kernel with early_kv reads the batch layout and stages the keys written by
  // earlier steps before griddepcontrol.wait (TileArgs::early_kv); everything else waits first.
  const bool early = kSplit && a.early_kv != 0;
  // Fused RoPE + KV store (TileArgs::rope_tokens): the table and the new tokens' raw K/V rows
  // live after the tile's shared memory.
  const bool rope = kSplit && a.rope_tokens > 0;
  float* s_cs = reinterpret_cast<float*>(smem_raw + C::kSmemBytes);        // [rope_tokens][D]
  T* s_new = reinterpret_cast<T*>(s_cs + (rope ? a.rope_tokens * D : 0));  // [rope_tokens][2][D]
  pdl_trigger();
  if (!early) pdl_wait();

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int kvh = blockIdx.y, seq = blockIdx.z;
  const int G = a.group;

  const int q0 = a.seq_q_start[seq];
  const int q_len = a.seq_q_start[seq + 1] - q0;
  const int kv_len = a.seq_kv_len[seq];
  const int rows_total = q_len * G;
  const int ctx = kv_len - q_len;  // position of the sequence's first new token

  // CTA-uniform ranges: rows [row0, row0 + kRows) ∩ [0, rows_total), keys [k_begin, k_end).
  int row0, k_begin, k_end, split = 0;
  if constexpr (kSplit) {
    // Not a split-KV sequence, or an empty split (the reduce skips it): nothing to do, but the
    // CTA still waits (pdl.cuh: a grid whose CTAs all exit unwaited would let the next kernel
    // start before this one's predecessor has finished).
    split = blockIdx.x;
    row0 = 0;
    k_begin = split * a.chunk;
    if (q_len <= 0 || rows_total > kSplitRows || (split > 0 && k_begin >= kv_len) ||
        (rope && q_len > a.rope_tokens)) {
      if (early) pdl_wait();
      return;
    }
    k_end = (split == a.n_splits - 1) ? kv_len : min(k_begin + a.chunk, kv_len);
    k_end = max(k_end, k_begin);
  } else {
    if (rows_total <= a.skip_rows) return;  // left to the split-KV kernel (or q_len = 0)
    row0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * C::kRows;
    if (row0 >= rows_total) return;
    k_begin = 0;
    const int last_tok = (min(rows_total, row0 + C::kRows) - 1) / G;
    k_end = max(0, min(kv_len, ctx + last_tok + 1));
  }
  PERFX_TRACE_PROBE(1);  // trace builds: the batch layout read (its values decided the above)

  // This thread's two rows (g4 and g4 + 8 of its warp's 16) and their exclusive key limits.
  const int g4 = lane >> 2, t4 = lane & 3;
  const int wrow0 = row0 + wm * 16;
  const bool warp_active = wrow0 < rows_total;
  int lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int rr = wrow0 + g4 + 8 * r;
    lim[r] = rr < rows_total ? min(k_end, ctx + rr / G + 1) : k_end;
  }
  // Warp-uniform bounds: keys >= w_max_lim are masked for all its rows, keys < w_min_lim for none.
  const int w_last = min(rows_total, wrow0 + 16) - 1;
  const int w_min_lim = min(k_end, ctx + wrow0 / G + 1);
  const int w_max_lim = min(k_end, ctx + w_last / G + 1);

  const T* qg = static_cast<const T*>(a.q);
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int8_t* kc8 = static_cast<const int8_t*>(a.k_cache);
  const int8_t* vc8 = static_cast<const int8_t*>(a.v_cache);
  const __half* kscale = static_cast<const __half*>(a.k_scale);
  const __half* vscale = static_cast<const __half*>(a.v_scale);

  // Q tile -> smem (rows past rows_total zero-filled).
  auto load_q = [&] {
    for (int c = tid; c < C::kRows * C::kChunks; c += kThreads) {
      const int r = c / C::kChunks, ch = c - r * C::kChunks;
      const int rr = row0 + r;
      const T* src = qg;
      int bytes = 0;
      if (rr < rows_total) {
        const int i = rr / G, g = rr - i * G;
        src = qg + static_cast<int64_t>(q0 + i) * a.ldq + static_cast<int64_t>(kvh * G + g) * D +
              ch * 8;
        bytes = 16;
      }
      cp_async_16(sQ + r * C::kStride + ch * 8, src, bytes);
    }
  };

  const int32_t* __restrict__ table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
  const int bs = a.block_size;
  const int64_t slot_stride = static_cast<int64_t>(a.n_kv_heads) * D;
  const int64_t head_off = static_cast<int64_t>(kvh) * D;

  // Slot of key j, or -1 for keys >= k_end (and, defensively, keys whose block-table entry is
  // out of the row or negative): those are zero-filled without touching memory.
  auto slot_of = [&](int j) -> int64_t {
    if (j >= k_end) return -1;
    const int bi = j / bs;
    // nc-ok: the block table: the batch layout, uploaded before the step
    const int blk = bi < a.max_blocks ? __ldg(table + bi) : -1;
    return blk >= 0 ? static_cast<int64_t>(blk) * bs + (j - bi * bs) : -1;
  };

  // Keys [kt, kt + 64) ∩ [from, to) minus [skip_lo, skip_hi) -> stage st (kQ8: raw stage st);
  // other rows untouched.
  auto load_kv = [&](int kt, int st, int from, int to, int skip_lo = 0, int skip_hi = 0) {
    auto take = [&](int j) { return j >= from && j < to && (j < skip_lo || j >= skip_hi); };
    if constexpr (kQ8) {
      static_assert(C::kRawIters * kThreads == kTileKeys * (D / 16), "raw chunks per thread");
      static_assert(q8_scale_stride(D) == 4, "8-byte scale records (the raw stage's layout)");
      unsigned char* rk = sRaw + st * C::kRawStage;
      unsigned char* rv = rk + C::kRawHalf;
#pragma unroll
      for (int it = 0; it < C::kRawIters; ++it) {
        const int c = tid + it * kThreads;
        const int r = c / (D / 16), ch = c - r * (D / 16);
        if (!take(kt + r)) continue;
        const int64_t slot = slot_of(kt + r);
        const int64_t off = slot >= 0 ? slot * slot_stride + head_off + ch * 16 : 0;
        cp_async_16(rk + r * D + ch * 16, kc8 + off, slot >= 0 ? 16 : 0);
        cp_async_16(rv + r * D + ch * 16, vc8 + off, slot >= 0 ? 16 : 0);
      }
      if (tid < kTileKeys && take(kt + tid)) {
        const int64_t slot = slot_of(kt + tid);
        const int64_t so = slot >= 0 ? (slot * a.n_kv_heads + kvh) * q8_scale_stride(D) : 0;
        cp_async_8(rk + kTileKeys * D + tid * 8, kscale + so, slot >= 0 ? 8 : 0);
        cp_async_8(rv + kTileKeys * D + tid * 8, vscale + so, slot >= 0 ? 8 : 0);
      }
    } else {
      T* dk = sK + st * C::kKvElems;
      T* dv = sV + st * C::kKvElems;
#pragma unroll
      for (int it = 0; it < C::kKvIters; ++it) {
        const int c = tid + it * kThreads;
        const int r = c / C::kChunks, ch = c - r * C::kChunks;
        if (!take(kt + r)) continue;
        const int64_t slot = slot_of(kt + r);
        const int64_t off = slot >= 0 ? slot * slot_stride + head_off + ch * 8 : 0;
        cp_async_16(dk + r * C::kStride + ch * 8, kc + off, slot >= 0 ? 16 : 0);
        cp_async_16(dv + r * C::kStride + ch * 8, vc + off, slot >= 0 ? 16 : 0);
      }
    }
  };

  // kQ8: raw stage st -> the T tiles (zero-filled keys have zero scales: they become zeros).
  auto dequant_stage = [&](int st) {
    const unsigned char* rk = sRaw + st * C::kRawStage;
    const unsigned char* rv = rk + C::kRawHalf;
#pragma unroll
    for (int it = 0; it < C::kKvIters; ++it) {
      const int c = tid + it * kThreads;
      const int r = c / C::kChunks, ch = c - r * C::kChunks;
      const float kd =
          __half2float(reinterpret_cast<const __half*>(rk + kTileKeys * D + r * 8)[ch >> 2]);
      const float vd =
          __half2float(reinterpret_cast<const __half*>(rv + kTileKeys * D + r * 8)[ch >> 2]);
      *reinterpret_cast<uint4*>(sK + r * C::kStride + ch * 8) =
          dequant_q8x8<T>(*reinterpret_cast<const uint2*>(rk + r * D + ch * 8), kd);
      *reinterpret_cast<uint4*>(sV + r * C::kStride + ch * 8) =
          dequant_q8x8<T>(*reinterpret_cast<const uint2*>(rv + r * D + ch * 8), vd);
    }
  };

  const int n_tiles = (k_end - k_begin + kTileKeys - 1) / kTileKeys;
  // Keys [k_begin, early_end) of the first kStages tiles were written by earlier steps: with
  // `early` they are staged before the wait (one cp.async group, or bulk copies on the stages'
  // mbarriers), the rest of those tiles after it.
  constexpr int kAll = 0x7fffffff;
  static_assert(kStages == 2, "tile t + 1 goes to stage (t + 1) & 1 below");
  const int early_end = early ? max(k_begin, min(ctx, k_end)) : k_begin;
  // TileArgs::early_bulk: those keys come as bulk copies instead of 16-byte cp.async, thread tid
  // taking key row tid % 64 of stage tid / 64 and completing on the stage's mbarrier s_bar[st]
  // (64 arrivals, each expecting the bytes it copies): a KV block whose rows are all such keys
  // as one tensor copy of K and one of V by the thread of its first row (TileArgs::tmap_k; the
  // block's other threads arrive expecting nothing), any other row as one copy of K and one of V
  // by its own thread. Blocks line up with the stages when k_begin is a multiple of the block.
#if defined(PERFX_ATTN_EMULATION)
  static uint64_t s_bar[kStages];  // the emulator runs one CTA at a time: shared by its threads
#else
  __shared__ __align__(8) uint64_t s_bar[kStages];
#endif
  const bool bulk = kHasBulkCopy && !kQ8 && a.early_bulk != 0 && early_end > k_begin;
  if (bulk) {
    static_assert(kThreads == kStages * kTileKeys, "one thread per key row of the ring");
    if (tid < kStages) mbar_init(&s_bar[tid], kTileKeys);
    __syncthreads();
    PERFX_TRACE_PROBE(3);  // trace builds: the mbarriers' init published
    const int st = tid / kTileKeys, r = tid - st * kTileKeys, j = k_begin + st * kTileKeys + r;
    T* dk = sK + st * C::kKvElems + r * C::kStride;
    T* dv = sV + st * C::kKvElems + r * C::kStride;
    const int64_t slot = j < early_end ? slot_of(j) : -1;
    // j's block is copied whole: all its keys are earlier keys (then all have slots, or none).
    const int js = j - (j - k_begin) % bs;  // the block's first key (k_begin block-aligned)
    const bool boxes = a.tmap_k.rows > 0 && k_begin % bs == 0 &&
                       (reinterpret_cast<uintptr_t>(sK) & 127) == 0;  // TMA: 128-byte aligned
    const bool whole = boxes && slot >= 0 && js + bs <= early_end;
    if (slot < 0 && j < early_end) {  // a hole in the block table: zeros, as cp.async's zero-fill
#pragma unroll
      for (int ch = 0; ch < C::kChunks; ++ch) {
        reinterpret_cast<uint4*>(dk)[ch] = make_uint4(0, 0, 0, 0);
        reinterpret_cast<uint4*>(dv)[ch] = make_uint4(0, 0, 0, 0);
      }
    }
    constexpr unsigned kRow = D * sizeof(T);
    const unsigned box = static_cast<unsigned>(bs) * C::kStride * sizeof(T);  // a block, padded
    mbar_arrive_expect_tx(&s_bar[st], whole ? (j == js ? 2 * box : 0u) : slot < 0 ? 0u : 2 * kRow);
    PERFX_TRACE_PROBE(4);  // trace builds: the row's block-table entry read, its bytes announced
    if (whole) {
      if (j == js) {
        tma_load_2d(dk, a.tmap_k, static_cast<int>(head_off), static_cast<int>(slot), &s_bar[st]);
        tma_load_2d(dv, a.tmap_v, static_cast<int>(head_off), static_cast<int>(slot), &s_bar[st]);
      }
    } else if (slot >= 0) {
      const int64_t off = slot * slot_stride + head_off;
      bulk_copy_g2s(dk, kc + off, kRow, &s_bar[st]);
      bulk_copy_g2s(dv, vc + off, kRow, &s_bar[st]);
    }
  } else if (early_end > k_begin) {
#pragma unroll
    for (int st = 0; st < kStages; ++st)
      if (st < n_tiles) load_kv(k_begin + st * kTileKeys, st, k_begin, early_end);
    cp_async_commit();
  }
  PERFX_TRACE_PROBE(2);  // trace builds: earlier keys' staging issued (block-table reads too)
  // Fused RoPE: this split's new keys [new_lo, new_hi) (tokens new_lo - ctx ..) are rotated and
  // written by the prologue below; in the ring's first kStages tiles they go straight into shared
  // memory, so the loads of those tiles skip them (skip_hi = 0 when not fused).
  const int new_lo = max(k_begin, ctx), new_hi = rope ? k_end : 0;
  if (rope) {  // the cos / sin table of the sequence's new tokens (positions ctx, ctx + 1, ...)
    const int half = a.rot_dim / 2;
    for (int c = tid; c < q_len * half; c += kThreads) {
      const int i = c / half, p = c - i * half;
      rope_detail::rope_cos_sin(ctx + i, a.inv_freq[p], a.rope_af, &s_cs[i * D + p],
                                &s_cs[i * D + D / 2 + p]);
    }
  }
  if (early) pdl_wait();
  load_q();
  if (rope) {  // the new keys' raw K and V rows (the QKV projection's output)
    const int n_new = max(0, new_hi - new_lo);
    for (int c = tid; c < n_new * 2 * C::kChunks; c += kThreads) {
      const int r = c / C::kChunks, ch = c - r * C::kChunks;  // r = 2 * (key - new_lo) + is_v
      const int i = new_lo - ctx + (r >> 1);
      const T* src = (r & 1) ? static_cast<const T*>(a.v_new) + (q0 + i) * a.ldv_new
                             : static_cast<const T*>(a.k_new) + (q0 + i) * a.ldk_new;
      cp_async_16(s_new + (2 * i + (r & 1)) * D + ch * 8, src + head_off + ch * 8, 16);
    }
  }
  cp_async_commit();
  if (n_tiles > 0) load_kv(k_begin, 0, early_end, kAll, new_lo, new_hi);
  cp_async_commit();

  // Q fragments stay in registers for the whole key loop.
  cp_async_wait<1>();     // the Q group has landed (for this thread) ...
  __syncthreads();        // ... and for every thread
  PERFX_TRACE_PROBE(11);  // trace builds: q (and the new keys' raw rows) in shared memory
  if constexpr (kSplit) {
    if (rope) {
      rope_prologue<T, D, WM, WN, kQ8>(a, sQ, sK, sV, sRaw, s_cs, s_new, rows_total, new_lo, new_hi,
                                       k_begin, ctx, kvh, slot_of);
      __syncthreads();
    }
  }
  PERFX_TRACE_PROBE(12);  // trace builds: RoPE and the KV store done
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    ldmatrix_x4(qf[ks], sQ + (wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * C::kStride + ks * 16 +
                            (lane >> 4) * 8);

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max of scale*log2(e)*s, per row
  float l_run[2] = {0.f, 0.f};              // running sum of exp2, this thread's columns only

  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles)
      load_kv(k_begin + (t + 1) * kTileKeys, (t + 1) & 1, t + 1 < kStages ? early_end : k_begin,
              kAll, new_lo, t + 1 < kStages ? new_hi : 0);
    cp_async_commit();   // possibly empty: keeps one group per iteration
    cp_async_wait<1>();  // everything but the newest group: tile t is here
    if (bulk && t < kStages) mbar_wait(&s_bar[t], 0);  // ... and its bulk-copied rows
    __syncthreads();
    if (t == 0) PERFX_TRACE_PROBE(15);  // trace builds: the first tile in shared memory
    if constexpr (kQ8) {
      dequant_stage(t & 1);
      __syncthreads();
    }

    const int jb = k_begin + t * kTileKeys + wn * C::kKW;  // first key of this warp's slice
    if (warp_active && jb < w_max_lim) {
      const int cs = kQ8 ? 0 : (t & 1);  // the T stage holding tile t
      const T* cK = sK + cs * C::kKvElems + wn * C::kKW * C::kStride;
      const T* cV = sV + cs * C::kKvElems + wn * C::kKW * C::kStride;

      // S = Q K^T over the slice: kKW/8 n-tiles of 8 keys.
      float s[C::kKW / 8][4];
#pragma unroll
      for (int nt = 0; nt < C::kKW / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
        for (int np = 0; np < C::kKW / 16; ++np) {
          uint32_t b[4];
          // matrices: (keys 0-7, dims lo), (keys 0-7, dims hi), (keys 8-15, lo), (keys 8-15, hi)
          ldmatrix_x4(b, cK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * C::kStride + ks * 16 +
                             ((lane >> 3) & 1) * 8);
          mma16816<T>(s[2 * np], qf[ks], b[0], b[1]);
          mma16816<T>(s[2 * np + 1], qf[ks], b[2], b[3]);
        }
      }

      // Scale to log2 units; mask keys past each row's limit (diagonal / range-end tiles only).
      const float sl2 = a.scale_log2;
      const bool need_mask = jb + C::kKW > w_min_lim;
#pragma unroll
      for (int nt = 0; nt < C::kKW / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[nt][e] * sl2;
          if (need_mask) {
            const int key = jb + nt * 8 + 2 * t4 + (e & 1);
            if (key >= lim[e >> 1]) v = -INFINITY;
          }
          s[nt][e] = v;
        }
      }

      // Online softmax (rows g4: e = 0,1; g4 + 8: e = 2,3). A row reduced over the quad.
      float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
      for (int nt = 0; nt < C::kKW / 8; ++nt) {
        mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
      }
      float msub[2], alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        msub[r] = mx[r] == -INFINITY ? 0.f : mx[r];  // fully masked so far: avoid inf - inf
        alpha[r] = exp2f(m_run[r] - msub[r]);        // exp2(-inf) = 0 on the first tile
        m_run[r] = mx[r];
      }
      float rsum[2] = {0.f, 0.f};
#pragma unroll
      for (int nt = 0; nt < C::kKW / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = exp2f(s[nt][e] - msub[e >> 1]);
          s[nt][e] = p;
          rsum[e >> 1] += p;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + rsum[r];
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        o[dn][0] *= alpha[0];
        o[dn][1] *= alpha[0];
        o[dn][2] *= alpha[1];
        o[dn][3] *= alpha[1];
      }

      // O += P V: P's C fragments of n-tiles 2kk, 2kk+1 are exactly the A fragment of k-step kk.
#pragma unroll
      for (int kk = 0; kk < C::kKW / 16; ++kk) {
        const uint32_t pa[4] = {Ops::pack(s[2 * kk][0], s[2 * kk][1]),
                                Ops::pack(s[2 * kk][2], s[2 * kk][3]),
                                Ops::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                Ops::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          // matrices (transposed): (keys 0-7, dims lo), (keys 8-15, lo), (0-7, hi), (8-15, hi)
          ldmatrix_x4_trans(b, cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * C::kStride +
                                   dp * 16 + (lane >> 4) * 8);
          mma16816<T>(o[2 * dp], pa, b[0], b[1]);
          mma16816<T>(o[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // stage t&1 is refilled by the next iteration's load
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  cp_async_wait<0>();
  __syncthreads();        // the K/V ring is free: reuse it as the merge buffer
  PERFX_TRACE_PROBE(13);  // trace builds: the key loop done

  {
    float* myO = sO + (wn * C::kRows + wm * 16) * C::kOStride;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      *reinterpret_cast<float2*>(myO + g4 * C::kOStride + dn * 8 + 2 * t4) =
          make_float2(o[dn][0], o[dn][1]);
      *reinterpret_cast<float2*>(myO + (g4 + 8) * C::kOStride + dn * 8 + 2 * t4) =
          make_float2(o[dn][2], o[dn][3]);
    }
    if (t4 == 0) {
      const int rb = wn * C::kRows + wm * 16 + g4;
      sM[rb] = m_run[0];
      sM[rb + 8] = m_run[1];
      sL[rb] = l_run[0];
      sL[rb + 8] = l_run[1];
    }
  }
  __syncthreads();

  // Merge the WN key slices per row; write 8 consecutive dims per item (16-byte stores).
  // Split-KV with n_splits > 1 writes fp32 partials; with split counters a sequence whose keys
  // fit one split writes out directly (merging one split changes no bit: f = 1).
  bool to_ws = false;
  int n_valid = 1;
  if constexpr (kSplit) {
    n_valid = valid_splits(a, kv_len);
    to_ws = a.n_splits > 1 && !(a.counters != nullptr && n_valid == 1);
  }
  for (int c = tid; c < C::kRows * C::kChunks; c += kThreads) {
    const int r = c / C::kChunks, ch = c - r * C::kChunks;
    const int rr = row0 + r;
    if (rr >= rows_total) continue;
    float mmax = -INFINITY;
#pragma unroll
    for (int w = 0; w < WN; ++w) mmax = fmaxf(mmax, sM[w * C::kRows + r]);
    float L = 0.f;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < WN; ++w) {
      const float mw = sM[w * C::kRows + r];
      const float f = mw == -INFINITY ? 0.f : exp2f(mw - mmax);
      L += f * sL[w * C::kRows + r];
      const float4* src =
          reinterpret_cast<const float4*>(sO + (w * C::kRows + r) * C::kOStride + ch * 8);
      const float4 x0 = src[0], x1 = src[1];
      acc[0] += f * x0.x;
      acc[1] += f * x0.y;
      acc[2] += f * x0.z;
      acc[3] += f * x0.w;
      acc[4] += f * x1.x;
      acc[5] += f * x1.y;
      acc[6] += f * x1.z;
      acc[7] += f * x1.w;
    }
    const int i = rr / G, g = rr - i * G;
    if (to_ws) {
      const int64_t idx =
          ((static_cast<int64_t>(seq) * a.n_kv_heads + kvh) * kSplitRows + r) * a.n_splits + split;
      float4* dst = reinterpret_cast<float4*>(a.ws_o + idx * D + ch * 8);
      dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
      if (ch == 0) {
        a.ws_ml[idx * 2] = mmax;
        a.ws_ml[idx * 2 + 1] = L;
      }
    } else {
      const float inv = L > 0.f ? 1.f / L : 0.f;  // no key at all (bad input): zeros
      uint4 u;
      u.x = Ops::pack(acc[0] * inv, acc[1] * inv);
      u.y = Ops::pack(acc[2] * inv, acc[3] * inv);
      u.z = Ops::pack(acc[4] * inv, acc[5] * inv);
      u.w = Ops::pack(acc[6] * inv, acc[7] * inv);
      T* dst = static_cast<T*>(a.out) + static_cast<int64_t>(q0 + i) * a.ldo +
               static_cast<int64_t>(kvh * G + g) * D + ch * 8;
      *reinterpret_cast<uint4*>(dst) = u;
    }
  }
  PERFX_TRACE_PROBE(14);  // trace builds: this CTA's output (or partials) stored
  // Split counters: the CTA that finishes last for its (sequence, KV head) merges the splits
  // (threadFenceReduction's pattern: partials visible device-wide before the count, the count's
  // winner reads them after its own fence).
  if constexpr (kSplit) {
    if (to_ws && a.counters != nullptr) {
      int* last = reinterpret_cast<int*>(smem_raw);  // the Q tile is free after the key loop
      __threadfence();
      __syncthreads();
      if (tid == 0) {
        int* c = a.counters + static_cast<int64_t>(seq) * a.n_kv_heads + kvh;
        const bool is_last = atomicAdd(c, 1) == n_valid - 1;
        if (is_last) *c = 0;  // ready for the next call
        *last = is_last ? 1 : 0;
      }
      __syncthreads();
      if (*last) {
        __threadfence();
        merge_splits<T, D>(a, seq, kvh, q0, rows_total, n_valid);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Split-KV reduce: grid (n_kv_heads, n_seqs), kThreads threads (without split counters).

/// Merges the splits of one (sequence, KV head) (merge_splits).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) split_reduce_kernel(const TileArgs a) {
  PERFX_TRACE(kTrAttnReduce, a.k_cache);
  pdl_enter();
  const int kvh = blockIdx.x, seq = blockIdx.y;
  const int q0 = a.seq_q_start[seq];
  const int q_len = a.seq_q_start[seq + 1] - q0;
  const int kv_len = a.seq_kv_len[seq];
  const int rows_total = q_len * a.group;
  if (q_len <= 0 || rows_total > kSplitRows) return;
  merge_splits<T, D>(a, seq, kvh, q0, rows_total, valid_splits(a, kv_len));
}

// ---------------------------------------------------------------------------------------------
// Host hooks between the two .cu files.

/// Raises the prefill kernels' dynamic shared-memory limit on the current device.
void prefill_set_attributes();

/// Launches the prefill kernel: grid (n_row_tiles, n_kv_heads, n_seqs). Throws on launch failure.
void launch_prefill(AttnDtype dtype, int head_dim, const TileArgs& args, int n_row_tiles,
                    int n_kv_heads, int n_seqs, cudaStream_t stream);

}  // namespace perfx::cuda::attn_detail
