// W4 GEMV v3 (M = 1..8 tokens): the decode kernel built for few instructions per weight byte.
//
// Why (docs/cuda_linear_notes.md §9): Nsight Compute on the 7B gate|up GEMV at M = 1 showed v1
// issuing ~140 and v2 ~106 warp instructions per 512-byte warp quad (v2's SASS: ~95 per ring slot,
// of which 20 convert nibbles and 4 are mma; the rest is per-slot bookkeeping, predicates,
// re-read thread ids and a per-slot flush), with the schedulers ~50 % busy and DRAM at 29–43 %.
// v3 keeps the device layout and the mma data flow of v1 and removes the bookkeeping:
//   - Work: task = (row block, K segment); S warps of one CTA split a row block's K into equal
//     group-aligned segments (S = 1, 2, 4, 8), the CTA's 8 warps cover 8 / S row blocks, and a
//     CTA walks row-block groups blockIdx.x, blockIdx.x + gridDim.x, … (one persistent wave).
//   - A ring of kU = 8 (groups 32 / 64 with scale/zero records: 6) weight quads per lane: every
//     batch of kU consecutive chunks of a warp's task sequence lies inside one segment, so a
//     batch's addresses are one base pointer plus immediate offsets, the next batch's base / count
//     are computed once per batch, and slot u is reloaded right after it is consumed (loads stay in
//     flight across segments and row blocks).
//   - No branches in the slot body: loads are predicated and keep stale (finite) registers when
//     off; a slot past a share's end gets an all-zero record, whose scale 0 (the zero it implies
//     may be 8: symmetric records) makes its whole group (groups never straddle a share's end)
//     contribute exactly 0. The same holds for the second half of K's last chunk when K % 64 =
//     32: its activations are stale, its scale (record .y, or a padded group's record) is 0.
//   - Zero point inside the conversion (w4_word_to_frag_f16 / _bf16: exact q − z), the mma
//     accumulates a whole group, one fp32 scale FMA per accumulator per group (group 32: per
//     half-chunk).
//   - Activations read straight from global memory (L1-resident after the first warp touches
//     them): no staging, no prologue barrier, no shared-memory limit on K; two slots ahead in two
//     register buffers (groups >= 128), so an L1 hit's latency leaves the slot's critical path.
//   - The S partial sums of a row block meet in shared memory behind a named barrier of those S
//     warps only (double-buffered by segment parity).
// PDL: weights are requested before griddepcontrol.wait; activations, bias and y after it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "backend/cuda/linear_internal.cuh"
#include "backend/cuda/swiglu.cuh"

namespace perfx::cuda {
namespace {

using frag::BF16;
using frag::F16;

/// Weight quads in flight per lane (one batch) for gs_shift GS: 8, or 6 for groups 32 / 64 with
/// scale/zero records (a record per chunk or half-chunk: 8 slots spill heavily; 6 leave 12 bytes
/// of spill for group 32 at 128 registers). Symmetric records (sym, group 32) take 8: one record
/// per chunk and no zeros leave room, and the H200 measured 8 ahead of 6 and of 10
/// (docs/cuda_linear_notes.md §21: 7B Q4_0 513 vs 481 tok/s; 10 slots, whose default split
/// halves, 462). A batch holds whole groups.
__host__ __device__ constexpr int ring_slots(int GS, bool sym) {
  return GS <= 1 && !sym ? 6 : 8;
}
constexpr int kNW = 8;     // warps per CTA
constexpr int kMaxGs = 4;  // gs_shift <= 4: group <= 512, so a group never spans two batches

/// Calls f(std::integral_constant<int, i>) for i = 0..N-1 (compile-time slot indices, so the
/// loads' immediate offsets are constants).
template <int N, typename F, int I = 0>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    static_for<N, F, I + 1>(static_cast<F&&>(f));
  }
}

/// Named barrier `id` over `threads` threads (PTX bar.sync).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/// Predicated 16-byte loads that leave `r` unchanged when !ok (no zero fill: the callers keep
/// only finite stale values there, which meet zero weights or zero scales). Volatile: kept in
/// program order among the mma (issued one slot ahead of their use, so a batch's activations are
/// not all held in registers at once). `off` is a byte offset folded into the instruction.
/// Coherent (no .nc): the previous kernel of the PDL chain wrote these (pdl.cuh's contract;
/// docs/cuda_linear_notes.md §27).
template <int OFF>
__device__ __forceinline__ void ld_keep_x(uint4& r, const void* p, bool ok) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p ld.global.v4.u32 {%0, %1, %2, %3}, [%4 + "
      "%6];\n}"
      : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w)
      : "l"(p), "r"((int)ok), "n"(OFF));
}
/// 8-byte versions (W4A8: a slot half's int8 activations; a group's {scale, sum} record), coherent
/// for the same reason: quantize_act_q8, the previous kernel, wrote both.
template <int OFF>
__device__ __forceinline__ void ld_keep_x8(uint2& r, const void* p, bool ok) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p ld.global.v2.u32 {%0, %1}, [%2 + %4];\n}"
      : "+r"(r.x), "+r"(r.y)
      : "l"(p), "r"((int)ok), "n"(OFF));
}
template <int OFF>
__device__ __forceinline__ void ld_keep_meta(int2& r, const void* p, bool ok) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p ld.global.v2.s32 {%0, %1}, [%2 + %4];\n}"
      : "+r"(r.x), "+r"(r.y)
      : "l"(p), "r"((int)ok), "n"(OFF));
}
/// c += a · b, m16n8k32, a unsigned 8-bit (the weights' q), b signed 8-bit (activations), int32.
__device__ __forceinline__ void mma_u8s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/// Streamed weights (no L1 allocation, 256-byte L2 prefetch), unchanged when !ok. Weights only:
/// the read-only path is wrong for anything a kernel writes (pdl.cuh).
/// `pol`: the L2 cache policy of frag::l2_stream_policy (evict-first or normal).
template <int OFF>
__device__ __forceinline__ void ld_keep_w(uint4& r, const void* p, bool ok, uint64_t pol) {
  // nc-ok: packed weights, immutable
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p "
      "ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4 + %6], "
      "%7;\n}"
      : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w)
      : "l"(p), "r"((int)ok), "n"(OFF), "l"(pol));
}
/// A scale/zero record, zero when !ok (a zero record makes its whole group contribute 0).
/// Records only (the read-only path, pdl.cuh).
template <int OFF>
__device__ __forceinline__ uint2 ld_rec(const void* p, bool ok, uint64_t pol) {
  uint2 r;
  // nc-ok: scale/zero records, immutable
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n @p "
      "ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2 + %4], %5;\n}"
      : "=r"(r.x), "=r"(r.y)
      : "l"(p), "r"((int)ok), "n"(OFF), "l"(pol));
  return r;
}

/// Where a warp's batch lies: its first chunk's quad / record / activation addresses (this lane),
/// how many of its kU slots hold real chunks (cnt) and how many of those have their second
/// 32-channel half inside K (cnt_hi; less only when K % 64 = 32), and its row block.
template <typename T>
struct Batch {
  const uint4* q;
  const uint2* s;
  const T* x;
  int mo;  // W4A8: the first chunk's group index (activation records)
  int cnt, cnt_hi;
  int t, j;  // task (row block) index and batch index within the task
  int64_t nb;
};

/// GS = gs_shift (group = 32 << GS). GS = 0: two scale/zero records per chunk (one per 32-channel
/// half); GS >= 1: one record per CPG = 2^(GS-1) chunks. PROBE (bench only): the same loads, a
/// batch only XOR-folded (no conversion, mma or activations): the memory side alone. A8: W4A8
/// (W4Gemv3Config::a8): int8 activations from a8, q·x in int32 per group (mma m16n8k32 u8·s8),
/// acc += scale · d · (Σ q x − zero · Σ x) per group. SYM (GS = 0 only): symmetric records
/// (W4Dims::sym), one per chunk holding both halves' scales, zeros 8.
template <typename Tag, typename OutT, int GS, bool PROBE, bool A8, bool SYM>
__global__ void __launch_bounds__(kNW * 32, 2)
    w4_gemv3_kernel(W4View w, const typename Tag::T* __restrict__ x, int M, int64_t ldx,
                    OutT* __restrict__ y, int64_t ldy, const float* __restrict__ bias, int S,
                    int trigger_pct, bool swiglu, L2Prefetch pf, W4A8Act a8, bool evict_first) {
  PERFX_TRACE(kTrGemv3, w.q);
  const uint64_t pol = frag::l2_stream_policy(evict_first);  // the weights' and records' L2 policy
  using T = std::conditional_t<A8, int8_t, typename Tag::T>;  // the activation element read
  constexpr int CPG = GS == 0 ? 1 : 1 << (GS - 1);            // chunks per record
  static_assert(!SYM || GS == 0, "symmetric records serve group 32 only");
  constexpr int NR = GS == 0 && !SYM ? 2 : 1;  // records per record slot
  constexpr int NM = GS == 0 ? 2 : 1;          // W4A8: activation groups per chunk
  constexpr int kU = ring_slots(GS, SYM);
  // W4A16 activation buffers (§17): 2 = slot u's are loaded at the end of slot u − 2 into the
  // buffer slot u − 2 consumed, so they have a whole slot to arrive (the 8-slot rings: groups
  // >= 128, and symmetric group 32, where §21 measured 7B Q4_0 546 vs 518 tok/s with one buffer
  // despite 28 bytes more spill); 1 = at the end of slot u − 1 (groups 32 / 64 with scale/zero
  // records, whose 6-slot rings lost with two buffers at group 128; W4A8 has its own activation
  // ring)
  constexpr int XW = (A8 || (GS <= 1 && !SYM)) ? 1 : 2;
  static_assert(kU >= 2 && kU % XW == 0,
                "a slot's activation buffer is refilled for slot u + XW of the next batch when "
                "u + XW wraps: the ring must hold whole buffer cycles");
  __shared__ float4 red[2][kNW][32];
  __shared__ uint4 warm[kNW * 32];  // frag::l2_warm_share's scratch

  if (trigger_pct <= 0) pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gid = lane >> 2, tid = lane & 3;
  const int KC = w.d.KC, G = w.d.G, NB = w.d.NB;
  const int R = kNW / S, rl = warp / S, sg = warp - rl * S;  // row-block lane, K share
  // This warp's chunks of a row block: [c_first, c_first + npos), whole records (K is a multiple
  // of the group size, so KC is a multiple of CPG).
  const int upr = KC / CPG, lu = (upr + S - 1) / S;
  const int c_first = sg * lu * CPG;
  const int npos = max(0, min(lu, upr - sg * lu)) * CPG;
  const int nbt = max(1, (npos + kU - 1) / kU);  // batches per task
  const int64_t nb_first = (int64_t)blockIdx.x * R + rl, nb_step = (int64_t)gridDim.x * R;
  const int ntask = nb_first < NB ? (int)((NB - 1 - nb_first) / nb_step) + 1 : 0;
  const int nbatch = ntask * nbt;
  // Tokens >= M read token M - 1's row: mma columns are independent and those are never stored.
  const T* xsrc;
  if constexpr (A8) {
    xsrc = a8.q;
    ldx = w.d.K;
  } else {
    xsrc = x;
  }
  const T* xrow = xsrc + (int64_t)min(gid, M - 1) * ldx + 8 * tid;
  // W4A8: this lane's two tokens' activation records (2 tid, 2 tid + 1; past M - 1: M - 1's)
  const int64_t n_groups = w.d.K >> (5 + GS);
  const int2* mrow0 = A8 ? a8.meta + (int64_t)min(2 * tid, M - 1) * n_groups : nullptr;
  const int2* mrow1 = A8 ? a8.meta + (int64_t)min(2 * tid + 1, M - 1) * n_groups : nullptr;
  const int kc_hi = (int)((w.d.K - 32 + 63) / 64);  // chunks whose second half starts below K

  constexpr int kGrpStep = GS == 0 ? 2 * kU : kU / CPG;  // groups per batch
  constexpr int kRecStep = NR == 2 ? 2 * kU : kU / CPG;  // records per batch
  // The batch after a (task order: the batches of a row block's share, then the next row block);
  // addresses advance by a batch inside a task and are recomputed at a task's start. Past the
  // warp's last task cnt = 0 (its loads are predicated off, so the addresses are never used).
  auto step = [&](const Batch<T>& a, Batch<T>& bt) {
    bt.j = a.j + 1;
    bt.t = a.t;
    if (bt.j == nbt) {
      bt.j = 0;
      ++bt.t;
    }
    const int kc0 = c_first + bt.j * kU;
    bt.cnt = bt.t < ntask ? max(0, min(kU, npos - bt.j * kU)) : 0;
    bt.cnt_hi = min(bt.cnt, kc_hi - kc0);
    if (bt.j == 0) {
      bt.nb = a.nb + nb_step;
      bt.q = w.q + frag::w4_q_index(KC, bt.nb, kc0, lane);
      bt.s = w.sz + frag::w4_sz_index(G, bt.nb, NR == 2 ? 2 * kc0 : kc0 / CPG, gid);
      bt.x = xrow + (int64_t)kc0 * 64;
      bt.mo = GS == 0 ? 2 * kc0 : kc0 / CPG;
    } else {
      bt.nb = a.nb;
      bt.q = a.q + kU * 32;
      bt.s = a.s + kRecStep * 8;
      bt.x = a.x + kU * 64;
      bt.mo = a.mo + kGrpStep;
    }
  };

  uint4 wq[kU];
  uint2 rec[kU][NR];
#pragma unroll
  for (int u = 0; u < kU; ++u) wq[u] = make_uint4(0, 0, 0, 0);
  auto load = [&](auto uc, const Batch<T>& bt) {
    constexpr int u = decltype(uc)::value;
    const bool ok = u < bt.cnt;
    ld_keep_w<u * 512>(wq[u], bt.q, ok, pol);
    if constexpr (PROBE) return;
    if constexpr (NR == 2) {
      rec[u][0] = ld_rec<2 * u * 64>(bt.s, ok, pol);
      rec[u][NR - 1] = ld_rec<(2 * u + 1) * 64>(bt.s, ok, pol);
    } else if (u % CPG == 0) {
      rec[u][0] = ld_rec<(u / CPG) * 64>(bt.s, ok, pol);
    }
  };

  Batch<T> cur;
  {  // batch 0: "the batch after" task -1's last batch
    Batch<T> before;
    before.j = nbt - 1;
    before.t = -1;
    before.nb = nb_first - nb_step;
    before.q = w.q;
    before.s = w.sz;
    before.x = xrow;
    before.mo = 0;
    step(before, cur);
  }
  static_for<kU>([&](auto uc) { load(uc, cur); });
  frag::l2_warm_share(pf, warm);  // the next linear's first bytes, while the predecessor runs
  pdl_wait();

  // Activations of slot u of batch bt: this lane's two 16-byte units (stale when the slot is not
  // real, or the second half lies past K).
  uint4 xb[XW][2] = {};
  // W4A8: int8 activations of the next XD slots (issued XD slots ahead: 16 bytes a slot, so the
  // ring is cheap, and the L1 latency of a slot's activations leaves its mma's critical path)
  constexpr int XD = A8 ? 2 : 1;
  static_assert(kU % XD == 0, "the activation ring wraps into the next batch at a slot boundary");
  uint2 xa[XD][2] = {};
  auto load_xa = [&](auto uc, const Batch<T>& bt) {
    constexpr int u = decltype(uc)::value;
    ld_keep_x8<u * 64>(xa[u % XD][0], bt.x, u < bt.cnt);
    ld_keep_x8<u * 64 + 32>(xa[u % XD][1], bt.x, u < bt.cnt_hi);
  };
  int2 mt[NM][2] = {};  // W4A8: the slot's group records for tokens 2 tid, 2 tid + 1
  auto load_x = [&](auto uc, const Batch<T>& bt) {  // A8: the group records only (one slot ahead)
    if constexpr (PROBE) return;
    constexpr int u = decltype(uc)::value;
    if constexpr (A8) {
      if constexpr (GS == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const bool ok = h == 0 ? u < bt.cnt : u < bt.cnt_hi;
          if (h == 0) {
            ld_keep_meta<2 * u * 8>(mt[0][0], mrow0 + bt.mo, ok);
            ld_keep_meta<2 * u * 8>(mt[0][1], mrow1 + bt.mo, ok);
          } else {
            ld_keep_meta<(2 * u + 1) * 8>(mt[NM - 1][0], mrow0 + bt.mo, ok);
            ld_keep_meta<(2 * u + 1) * 8>(mt[NM - 1][1], mrow1 + bt.mo, ok);
          }
        }
      } else if constexpr (u % CPG == 0) {
        ld_keep_meta<(u / CPG) * 8>(mt[0][0], mrow0 + bt.mo, u < bt.cnt);
        ld_keep_meta<(u / CPG) * 8>(mt[0][1], mrow1 + bt.mo, u < bt.cnt);
      }
    } else {
      ld_keep_x<u * 128>(xb[u % XW][0], bt.x, u < bt.cnt);
      ld_keep_x<u * 128 + 64>(xb[u % XW][1], bt.x, u < bt.cnt_hi);
    }
  };
  static_for<XW>([&](auto uc) { load_x(uc, cur); });
  if constexpr (A8) static_for<XD>([&](auto uc) { load_xa(uc, cur); });
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int buf = 0;
  // The batch after which this warp lets the next kernel launch (W4Gemv3Config::trigger_pct). The
  // CTA's first launch_dependents counts (PTX ISA, griddepcontrol), so the earliest warp decides;
  // warps without a task never trigger (the CTA's exit does, if none of its warps had work).
  const int trigger_b = trigger_pct > 0 && trigger_pct < 100 ? nbatch * trigger_pct / 100 : -1;
#pragma unroll 1
  for (int b = 0; b < nbatch; ++b) {
    if (b == trigger_b) pdl_trigger();
    Batch<T> nxt;
    step(cur, nxt);
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    int ci[4] = {0, 0, 0, 0};  // W4A8: the group's Σ q_w q_x
    uint32_t z_lo = 0, z_hi = 0;
    float s_lo = 0.f, s_hi = 0.f;
    static_for<kU>([&](auto uc) {
      constexpr int u = decltype(uc)::value;
      const uint4 xc[2] = {xb[u % XW][0], xb[u % XW][1]};
      const uint32_t words[4] = {wq[u].x, wq[u].y, wq[u].z, wq[u].w};
      if constexpr (PROBE) {
        acc[0] += __uint_as_float((words[0] ^ words[1] ^ words[2] ^ words[3]) & 0x3FFFFFu);
      } else if constexpr (A8) {
        const uint2 xs[2] = {xa[u % XD][0], xa[u % XD][1]};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (GS == 0 || (h == 0 && u % CPG == 0)) {  // a new group: its zeros and scales
            const uint2 r = frag::w4_rec_of_half(rec[u][NR == 2 ? h : 0], SYM, h);
            z_lo = r.y & 0xFFu;
            z_hi = (r.y >> 8) & 0xFFu;
            s_lo = frag::f16_lo(r.x);
            s_hi = frag::f16_hi(r.x);
          }
          // word j's low nibbles: row gid at channels b + {0, 2, 1, 3}; high: row gid + 8
          const uint32_t w0 = words[2 * h], w1 = words[2 * h + 1];
          const uint32_t a[4] = {frag::w4a8_a_reg(w0, 0), frag::w4a8_a_reg(w0, 1),
                                 frag::w4a8_a_reg(w1, 0), frag::w4a8_a_reg(w1, 1)};
          mma_u8s8(ci, a, xs[h].x, xs[h].y);
          if (GS == 0 || (h == 1 && u % CPG == CPG - 1)) {  // the group's end
            const int2 m0 = mt[GS == 0 ? h : 0][0], m1 = mt[GS == 0 ? h : 0][1];
            const float d0 = __int_as_float(m0.x), d1 = __int_as_float(m1.x);
            acc[0] = fmaf(s_lo * d0, (float)(ci[0] - (int)z_lo * m0.y), acc[0]);
            acc[1] = fmaf(s_lo * d1, (float)(ci[1] - (int)z_lo * m1.y), acc[1]);
            acc[2] = fmaf(s_hi * d0, (float)(ci[2] - (int)z_hi * m0.y), acc[2]);
            acc[3] = fmaf(s_hi * d1, (float)(ci[3] - (int)z_hi * m1.y), acc[3]);
#pragma unroll
            for (int i = 0; i < 4; ++i) ci[i] = 0;
          }
        }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (GS == 0 || (h == 0 && u % CPG == 0)) {  // a new group: its zeros and scales
            const uint2 r = frag::w4_rec_of_half(rec[u][NR == 2 ? h : 0], SYM, h);
            frag::w4_neg_zeros<Tag>(r.y, z_lo, z_hi);
            s_lo = frag::f16_lo(r.x);
            s_hi = frag::f16_hi(r.x);
          }
          frag::w4_half_mma<Tag>(c, words, h, z_lo, z_hi, xc[h]);
          if (GS == 0 || (h == 1 && u % CPG == CPG - 1)) {  // the group's end: scale into acc
            acc[0] = fmaf(s_lo, c[0], acc[0]);
            acc[1] = fmaf(s_lo, c[1], acc[1]);
            acc[2] = fmaf(s_hi, c[2], acc[2]);
            acc[3] = fmaf(s_hi, c[3], acc[3]);
#pragma unroll
            for (int i = 0; i < 4; ++i) c[i] = 0.f;
          }
        }
      }
      // XW slots ahead, into the buffer slot u has just consumed (W4A8: the group records)
      if constexpr (u + XW < kU)
        load_x(std::integral_constant<int, u + XW>{}, cur);
      else
        load_x(std::integral_constant<int, u + XW - kU>{}, nxt);
      if constexpr (A8) {
        if constexpr (u + XD < kU)
          load_xa(std::integral_constant<int, u + XD>{}, cur);
        else
          load_xa(std::integral_constant<int, u + XD - kU>{}, nxt);
      }
      load(uc, nxt);  // refill slot u with the next batch's chunk
    });
    // ---- the task's last batch: combine the S shares of row block cur.nb and write y
    if (cur.j == nbt - 1) {
      const int64_t nb = cur.nb;
      if (S > 1) {
        red[buf][warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        named_barrier(1 + rl, 32 * S);
        if (sg == 0) {
          for (int k = 1; k < S; ++k) {
            const float4 o = red[buf][warp + k][lane];
            acc[0] += o.x;
            acc[1] += o.y;
            acc[2] += o.z;
            acc[3] += o.w;
          }
        }
        buf ^= 1;
      }
      if (sg == 0 && swiglu) {
        // Interleaved gate|up: rows gid / gid + 8 of the block are gate / up channel c.
        const int64_t I = w.d.N / 2, c = nb * 8 + gid;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int token = 2 * tid + j;
          if (c < I && token < M) {
            float g = acc[j], u = acc[2 + j];
            if (bias != nullptr) {
              g += bias[c];      // nc-ok: bias, a weight, immutable
              u += bias[I + c];  // nc-ok: bias
            }
            g = frag::round_to<OutT>(g);
            u = frag::round_to<OutT>(u);
            y[(int64_t)token * ldy + c] = frag::to_out<OutT>(::perfx::cuda::swiglu(g, u));
          }
        }
      } else if (sg == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t row = nb * 16 + gid + 8 * (i >> 1);
          const int token = 2 * tid + (i & 1);
          if (row < w.d.N && token < M) {
            float v = acc[i];
            // nc-ok: bias: a weight, immutable
            if (bias != nullptr) v += bias[row];
            y[(int64_t)token * ldy + row] = frag::to_out<OutT>(v);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = 0.f;
    }
    cur = nxt;
  }
  if (nbatch > 0 && (trigger_pct >= 100 || (trigger_pct > 0 && trigger_b >= nbatch))) pdl_trigger();
  frag::l2_warm_drain(pf);
}

/// Launch of one instance: one wave at the instance's occupancy (cached), capped by c.grid_cap
/// and less c.grid_free slots.
template <typename Tag, typename OutT, int GS, bool PROBE, bool A8, bool SYM = false>
void launch_v3(const W4Gemv3Config& c, const W4View& w, const void* x, int M, int64_t ldx, void* y,
               int64_t ldy, const float* bias, cudaStream_t stream, int S) {
  static std::once_flag once;
  static int per_sm = 1;
  auto* fn = w4_gemv3_kernel<Tag, OutT, GS, PROBE, A8, SYM>;
  std::call_once(once, [&] {
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kNW * 32, 0));
    per_sm = std::max(1, per_sm);
  });
  const int64_t groups = ceil_div<int64_t>(w.d.NB, kNW / S);
  const int64_t wave = (int64_t)device_sm_count() * per_sm;
  int64_t grid = std::min<int64_t>(groups, wave);
  if (c.grid_cap > 0) grid = std::min<int64_t>(grid, c.grid_cap);
  if (c.grid_free > 0) grid = std::min<int64_t>(grid, std::max<int64_t>(1, wave - c.grid_free));
  CUDA_CHECK(launch_kernel_ex(fn, dim3((unsigned)grid), dim3(kNW * 32), 0, stream, c.pdl, w,
                              static_cast<const typename Tag::T*>(x), M, ldx, static_cast<OutT*>(y),
                              ldy, bias, S, c.late_trigger ? c.trigger_pct : 0, c.swiglu,
                              c.prefetch, c.a8, c.l2_evict_first));
}

template <typename Tag, typename OutT, bool PROBE, bool A8>
void launch_v3_gs(const W4Gemv3Config& c, const W4View& w, const void* x, int M, int64_t ldx,
                  void* y, int64_t ldy, const float* bias, cudaStream_t stream, int S) {
  switch (w.d.gs_shift) {
    case 0:
      if (w.d.sym)
        return launch_v3<Tag, OutT, 0, PROBE, A8, true>(c, w, x, M, ldx, y, ldy, bias, stream, S);
      return launch_v3<Tag, OutT, 0, PROBE, A8>(c, w, x, M, ldx, y, ldy, bias, stream, S);
    case 1:
      return launch_v3<Tag, OutT, 1, PROBE, A8>(c, w, x, M, ldx, y, ldy, bias, stream, S);
    case 2:
      return launch_v3<Tag, OutT, 2, PROBE, A8>(c, w, x, M, ldx, y, ldy, bias, stream, S);
    default:
      if constexpr (A8) throw Error("w4_gemv3: int8 activations need a group of 32, 64 or 128");
      if (w.d.gs_shift == 3)
        return launch_v3<Tag, OutT, 3, PROBE, false>(c, w, x, M, ldx, y, ldy, bias, stream, S);
      return launch_v3<Tag, OutT, 4, PROBE, false>(c, w, x, M, ldx, y, ldy, bias, stream, S);
  }
}

template <typename Tag, typename OutT>
void launch_v3_mode(const W4Gemv3Config& c, const W4View& w, const void* x, int M, int64_t ldx,
                    void* y, int64_t ldy, const float* bias, cudaStream_t stream, int S) {
  if (c.probe) {
    if constexpr (std::is_same_v<Tag, F16> && std::is_same_v<OutT, __half>) {
      launch_v3_gs<Tag, OutT, true, false>(c, w, x, M, ldx, y, ldy, bias, stream, S);
      return;
    }
    throw Error("w4_gemv3: the probe runs with fp16 activations and output only");
  }
  if (c.a8.q != nullptr)
    launch_v3_gs<Tag, OutT, false, true>(c, w, x, M, ldx, y, ldy, bias, stream, S);
  else
    launch_v3_gs<Tag, OutT, false, false>(c, w, x, M, ldx, y, ldy, bias, stream, S);
}

}  // namespace

PERFX_TRACE_BINDER(trace_bind_gemv3)

bool w4_gemv3_supported(const W4View& w, int M) {
  return M >= 1 && M <= 8 && w.d.gs_shift <= kMaxGs;
}

int w4_gemv3_default_split(const W4View& w, int M) {
  (void)M;
  // Measured on the H200 (docs/cuda_linear_notes.md §9): 8 warps per row block wins on every
  // Llama shape with at least one batch per segment; fewer only when K is too short for that.
  int S = kNW;
  while (S > 1 && w.d.KC < S * ring_slots(w.d.gs_shift, w.d.sym)) S /= 2;
  return S;
}

std::string describe_gemv3_kernels() {
  std::string r;
  r += describe_kernel(
      "w4_gemv3<f16,f16,g128>",
      reinterpret_cast<const void*>(w4_gemv3_kernel<F16, __half, 2, false, false, false>), kNW * 32,
      0);
  r += describe_kernel(
      "w4_gemv3<f16,f16,g32>",
      reinterpret_cast<const void*>(w4_gemv3_kernel<F16, __half, 0, false, false, false>), kNW * 32,
      0);
  r += describe_kernel(
      "w4_gemv3<f16,f16,g32sym>",
      reinterpret_cast<const void*>(w4_gemv3_kernel<F16, __half, 0, false, false, true>), kNW * 32,
      0);
  r += describe_kernel(
      "w4a8_gemv3<f16,f16,g128>",
      reinterpret_cast<const void*>(w4_gemv3_kernel<F16, __half, 2, false, true, false>), kNW * 32,
      0);
  r += describe_kernel(
      "w4_gemv3<bf16,bf16,g128>",
      reinterpret_cast<const void*>(w4_gemv3_kernel<BF16, __nv_bfloat16, 2, false, false, false>),
      kNW * 32, 0);
  return r;
}

void w4_gemv3(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
              int64_t ldy, const float* bias, cudaStream_t stream, const W4Gemv3Config& cfg) {
  check_linear_args("w4_gemv3", cfg.swiglu ? w.d.N / 2 : w.d.N, w.d.K, x, xt, M, ldx, y, yt, ldy);
  PERFX_CHECK(cfg.a8.q == nullptr ||
                  (cfg.a8.meta != nullptr && !cfg.probe && w.d.K % 128 == 0 && w.d.gs_shift <= 2),
              "w4_gemv3: int8 activations need their records, K a multiple of 128 and a group of "
              "32, 64 or 128");
  PERFX_CHECK(M <= 8, "w4_gemv3: M = " + std::to_string(M) + " > 8");
  PERFX_CHECK(!cfg.swiglu || (yt == xt && w.d.N % 16 == 0 && !cfg.probe),
              "w4_gemv3: the SwiGLU epilogue needs an interleaved gate|up weight (N = " +
                  std::to_string(w.d.N) + " a multiple of 16) and activation-dtype output");
  PERFX_CHECK(w.d.gs_shift <= kMaxGs, "w4_gemv3: group size " + std::to_string(w.d.group_size) +
                                          " > " + std::to_string(32 << kMaxGs));
  if (M == 0) return;
  const int S = cfg.split == 0 ? w4_gemv3_default_split(w, M) : cfg.split;
  PERFX_CHECK(S == 1 || S == 2 || S == 4 || S == 8,
              "w4_gemv3: split must be 1, 2, 4 or 8, got " + std::to_string(S));
  PERFX_CHECK(cfg.prefetch.aligned(),
              "w4_gemv3: an L2 prefetch range must be 16-byte aligned and a multiple of 16 bytes");
  dispatch_act_out(xt, yt, [&](auto tag, auto out) {
    launch_v3_mode<decltype(tag), decltype(out)>(cfg, w, x, M, ldx, y, ldy, bias, stream, S);
  });
}

}  // namespace perfx::cuda
