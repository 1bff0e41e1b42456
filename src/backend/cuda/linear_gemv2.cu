// W4 GEMV v2 (M = 1..16 tokens): the decode kernel with the zero point folded out of the weight
// conversion, one scale/zero correction per group, a rolling register ring of weight loads that
// continues across row blocks, and staged activations plus their per-group sums in shared memory.
//
// Same device layout as every W4 kernel (linear.cuh). Per CTA: `rpc` consecutive row blocks of 16
// rows; its NW warps split K into equal group-aligned chunk ranges (one per warp, padded to the
// ring length), so each warp's mma accumulates a whole group (or half-chunk for group 32) before
// the correction
//   acc += s·A·c − s·(B + z)·X      (X = Σ x over the group's channels, per token; A, B: FoldConv)
// Per 16-byte weight quad a lane spends 4 shifts/lop3 per word (no fp16 ops), 4·NT mma and two
// 16-byte shared loads per n8 token tile; the correction is ~20 instructions per group.
// Each lane keeps kU quads in flight: after consuming slot u it immediately reloads it with the
// chunk kU positions ahead in its sequence (which wraps into the CTA's next row block), so the
// memory pipe never drains between batches or row blocks. The NW per-warp accumulators of a row
// block are summed in shared memory (double-buffered, one __syncthreads per row block).
//
// PDL: the weight prologue is issued before griddepcontrol.wait (weights never depend on the
// previous kernel), x / bias / y only after it; launch_dependents is signalled at entry.
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

namespace perfx::cuda {
namespace {

using frag::BF16;
using frag::F16;

constexpr int kU = 8;                      // weight quads in flight per lane
constexpr size_t kV2MaxSmem = 200 * 1024;  // dynamic shared memory cap (opt-in attribute)

/// The cap on this device: kV2MaxSmem or less where the opt-in limit is lower (sm_80: 163 KB).
size_t v2_smem_limit() {
  static const size_t v = [] {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return std::min(kV2MaxSmem, (size_t)std::max(0, optin - 1024));
  }();
  return v;
}

/// Row stride (elements) of staged activations: ≡ 32 (mod 64), as linear_gemv.cu (conflict-free
/// 16-byte reads by rows 2p, 2p+1 of a quarter-warp).
__host__ __device__ __forceinline__ int v2_xs_ld(int KC) {
  return 64 * KC + 32;
}

/// Dynamic shared memory of one CTA: x [M][xs_ld] + X sums [G][8·NT] fp32 + reduction
/// [2][NW][NT][32] float4.
inline size_t v2_smem_bytes(const W4Dims& d, int M, int nw) {
  const int nt = M <= 8 ? 1 : 2;
  return (size_t)M * v2_xs_ld(d.KC) * 2 + (size_t)d.G * 8 * nt * 4 + (size_t)2 * nw * nt * 512;
}

/// 16-byte shared load kept in program order (volatile asm: not hoisted above the preceding mma,
/// so the staged activations of all kU slots are not held in registers at once).
__device__ __forceinline__ uint4 lds128(const uint4* p) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(frag::smem_u32(p)));
  return r;
}

/// Sum of the 8 elements of a 16-byte unit in fp32 (fixed order).
template <typename T>
__device__ __forceinline__ float sum8(const uint4& v) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __half>) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      s += f.x + f.y;
    } else {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u[i]));
      s += f.x + f.y;
    }
  }
  return s;
}

template <typename Tag, typename OutT, int CONV, bool PAIR, int NT>
__global__ void __launch_bounds__(256)
    w4_gemv2_kernel(W4View w, const typename Tag::T* x, int M, int64_t ldx, OutT* __restrict__ y,
                    int64_t ldy, const float* __restrict__ bias, int rpc) {
  using T = typename Tag::T;
  constexpr int NR = PAIR ? 2 : 1;  // scale/zero records per chunk slot
  constexpr int TOK = 8 * NT;
  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int gid = lane >> 2, tid = lane & 3;
  const int KC = w.d.KC, G = w.d.G, NB = w.d.NB;
  const int xs_ld = v2_xs_ld(KC);
  uint4* xs = smem;                                                        // [M][xs_ld / 8]
  float* xsum = reinterpret_cast<float*>(smem + (size_t)M * (xs_ld / 8));  // [G][TOK]
  float4* red = reinterpret_cast<float4*>(xsum + (size_t)G * TOK);         // [2][nw][NT][32]

  pdl_trigger();

  // ---- this warp's chunk range [c0, c1) of every row block, padded to len (same for all warps)
  const int cpg_shift = PAIR ? 0 : w.d.gs_shift - 1;  // chunks per group = 1 << cpg_shift
  const int cpg = 1 << cpg_shift;
  int span;
  if constexpr (PAIR) {
    span = (KC + nw - 1) / nw;
  } else {
    const int groups = (KC + cpg - 1) >> cpg_shift;
    span = ((groups + nw - 1) / nw) << cpg_shift;
  }
  const int c0 = min(KC, warp * span), c1 = min(KC, c0 + span);
  const int len = max(kU, (span + kU - 1) / kU * kU);
  const int nb0 = blockIdx.x * rpc;
  const int nrb = min(rpc, NB - nb0);

  uint4 wq[kU];
  uint2 sr[kU][NR];
  // Loads chunk kc of the row block whose quads start at qrow (records at srow) into slot u.
  // Callers pass qrow / srow / kc as a per-round base plus u, so the kU loads of a round use one
  // 64-bit base and immediate offsets.
  auto load = [&](int u, const uint4* qrow, const uint2* srow, int kc, bool ok) {
    if (ok && kc < c1) {
      wq[u] = frag::ld_weight_nc(qrow + kc * 32);
      if constexpr (PAIR) {
        sr[u][0] = __ldg(srow + 2 * kc * 8);             // nc-ok: scale/zero records, immutable
        sr[u][NR - 1] = __ldg(srow + (2 * kc + 1) * 8);  // nc-ok: records
      } else if ((kc & (cpg - 1)) == 0) {
        sr[u][0] = __ldg(srow + (kc >> cpg_shift) * 8);  // nc-ok: records
      }
    }
  };
  const uint4* qrow = w.q + (int64_t)nb0 * KC * 32 + lane;  // row block nb0 + rb (advanced per rb)
  const uint2* srow = w.sz + (int64_t)nb0 * G * 8 + gid;
  const int64_t q_rb_step = (int64_t)KC * 32, s_rb_step = (int64_t)G * 8;
#pragma unroll
  for (int u = 0; u < kU; ++u) load(u, qrow, srow, c0 + u, nrb > 0);

  // ---- activations and their per-group sums (after the previous grid, under PDL)
  pdl_wait();
  {
    const int units = 8 * KC, total = M * units;  // 16-byte units of the padded rows
    constexpr int B = 4;
#pragma unroll 1
    for (int i0 = threadIdx.x; i0 < total; i0 += B * blockDim.x) {
      uint4 v[B];
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int i = i0 + b * blockDim.x;
        v[b] = make_uint4(0, 0, 0, 0);
        if (i < total) {
          const int m = i / units, uu = i - m * units;
          const int64_t k = 8 * (int64_t)uu;
          if (k < w.d.K) v[b] = ld_act(x + (int64_t)m * ldx + k);
        }
      }
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int i = i0 + b * blockDim.x;
        if (i < total) {
          const int m = i / units, uu = i - m * units;
          xs[m * (xs_ld / 8) + uu] = v[b];
        }
      }
    }
    __syncthreads();
    // X[g][m]: 4 lanes per (g, m), each summing every 4th unit of the group, then 2 shuffles
    // (deterministic order). Tokens m >= M get 0.
    const int units_g = 4 << w.d.gs_shift;  // group_size / 8 >= 4
    const int pairs = G * TOK;
#pragma unroll 1
    for (int p0 = 0; p0 < pairs; p0 += (int)(blockDim.x >> 2)) {
      const int p = p0 + (threadIdx.x >> 2), j = threadIdx.x & 3;
      float s = 0.f;
      if (p < pairs) {
        const int g = p / TOK, m = p - g * TOK;
        if (m < M)
          for (int uu = j; uu < units_g; uu += 4) {
            const int gu = g * units_g + uu;
            if (gu < units) s += sum8<T>(xs[m * (xs_ld / 8) + gu]);
          }
      }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (p < pairs && j == 0) xsum[p] = s;
    }
    __syncthreads();
  }

  float acc[NT][4], c[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = c[t][i] = 0.f;
  uint2 cur = make_uint2(0, 0);
  const float a_lo = frag::fold_scale(CONV, 0), a_hi = frag::fold_scale(CONV, 1);
  const float b_lo = frag::fold_offset(CONV, 0), b_hi = frag::fold_offset(CONV, 1);

  // Applies one group's correction to acc and clears c.
  auto flush = [&](uint2 r, int g) {
    const float s_lo = frag::f16_lo(r.x), s_hi = frag::f16_hi(r.x);
    const float z_lo = (float)(r.y & 0xFu), z_hi = (float)((r.y >> 8) & 0xFu);
    const float sa_lo = s_lo * a_lo, sa_hi = s_hi * a_hi;
    const float sb_lo = s_lo * (b_lo + z_lo), sb_hi = s_hi * (b_hi + z_hi);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float2 X = *reinterpret_cast<const float2*>(xsum + (size_t)g * TOK + 8 * t + 2 * tid);
      acc[t][0] = fmaf(sa_lo, c[t][0], fmaf(-sb_lo, X.x, acc[t][0]));
      acc[t][1] = fmaf(sa_lo, c[t][1], fmaf(-sb_lo, X.y, acc[t][1]));
      acc[t][2] = fmaf(sa_hi, c[t][2], fmaf(-sb_hi, X.x, acc[t][2]));
      acc[t][3] = fmaf(sa_hi, c[t][3], fmaf(-sb_hi, X.y, acc[t][3]));
#pragma unroll
      for (int i = 0; i < 4; ++i) c[t][i] = 0.f;
    }
  };

  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  int buf = 0;
#pragma unroll 1
  for (int rb = 0; rb < nrb; ++rb) {
#pragma unroll 1
    for (int j0 = 0; j0 < len; j0 += kU) {
      // The positions kU ahead: this row block's chunks c0 + j0 + kU + u, or after the last round
      // (len is a multiple of kU) the next row block's c0 + u.
      const bool last_round = j0 + kU >= len;
      const uint4* qn = last_round ? qrow + q_rb_step : qrow;
      const uint2* sn = last_round ? srow + s_rb_step : srow;
      const int kn = last_round ? c0 : c0 + j0 + kU;
      const bool okn = !last_round || rb + 1 < nrb;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int kc = c0 + j0 + u;
        if (kc < c1) {  // warp-uniform
          uint4 xb[NT][2];
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            const int row = 8 * t + gid;
            const uint4* xr = xs + row * (xs_ld / 8) + 8 * kc + tid;  // x[row][64kc + 8tid]
            xb[t][0] = zero4;
            xb[t][1] = zero4;
            if (row < M) {
              xb[t][0] = lds128(xr);
              xb[t][1] = lds128(xr + 4);  // + 32 channels
            }
          }
          const uint32_t words[4] = {wq[u].x, wq[u].y, wq[u].z, wq[u].w};
          if constexpr (PAIR) {
            const uint2 r0 = sr[u][0], r1 = sr[u][NR - 1];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
              for (int jj = 0; jj < 2; ++jj) {
                uint32_t a[4];
                frag::w4_word_to_frag_fold(CONV, words[2 * h + jj], a);
#pragma unroll
                for (int t = 0; t < NT; ++t)
                  frag::mma16816<Tag>(c[t], a, jj == 0 ? xb[t][h].x : xb[t][h].z,
                                      jj == 0 ? xb[t][h].y : xb[t][h].w);
              }
              flush(h == 0 ? r0 : r1, 2 * kc + h);
            }
          } else {
            if ((kc & (cpg - 1)) == 0) cur = sr[u][0];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              uint32_t a[4];
              frag::w4_word_to_frag_fold(CONV, words[j], a);
              const int h = j >> 1;
#pragma unroll
              for (int t = 0; t < NT; ++t)
                frag::mma16816<Tag>(c[t], a, (j & 1) == 0 ? xb[t][h].x : xb[t][h].z,
                                    (j & 1) == 0 ? xb[t][h].y : xb[t][h].w);
            }
            if (((kc + 1) & (cpg - 1)) == 0 || kc + 1 == c1) flush(cur, kc >> cpg_shift);
          }
        }
        // Refill slot u with the position kU ahead (the next row block's start after the last
        // round: len is a multiple of kU).
        load(u, qn, sn, kn + u, okn);
      }
    }
    // ---- reduce the warps' accumulators of row block nb0 + rb and write y
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      red[((buf * nw + warp) * NT + t) * 32 + lane] =
          make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][i] = 0.f;
    }
    __syncthreads();
    const int64_t nb = nb0 + rb;
    for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
      const int t = i >> 7, ii = i & 127, src = ii >> 2, cc = ii & 3;
      float s = 0.f;
      for (int ww = 0; ww < nw; ++ww)
        s += reinterpret_cast<const float*>(&red[((buf * nw + ww) * NT + t) * 32 + src])[cc];
      const int64_t row = nb * 16 + (src >> 2) + 8 * (cc >> 1);
      const int token = 8 * t + 2 * (src & 3) + (cc & 1);
      if (row < w.d.N && token < M) {
        // nc-ok: bias: a weight, immutable
        if (bias != nullptr) s += bias[row];
        y[(int64_t)token * ldy + row] = frag::to_out<OutT>(s);
      }
    }
    buf ^= 1;
    qrow += q_rb_step;
    srow += s_rb_step;
  }
}

/// Raises an instance's dynamic shared-memory limit to kV2MaxSmem, once per process.
template <typename Tag, typename OutT, int CONV, bool PAIR, int NT>
auto v2_instance() {
  static std::once_flag once;
  auto* fn = w4_gemv2_kernel<Tag, OutT, CONV, PAIR, NT>;
  std::call_once(once, [&] {
    CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)v2_smem_limit()));
  });
  return fn;
}

template <typename T, typename OutT>
void launch_v2(void (*fn)(W4View, const T*, int, int64_t, OutT*, int64_t, const float*, int),
               dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, const W4View& w,
               const T* x, int M, int64_t ldx, OutT* y, int64_t ldy, const float* bias, int rpc) {
  if (rpc < 0) {  // persistent: one wave of resident CTAs (occupancy API; legal during capture)
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, (int)block.x, smem));
    rpc = std::max(
        1, (int)ceil_div<int64_t>(w.d.NB, (int64_t)device_sm_count() * std::max(1, per_sm)));
  }
  grid = dim3((unsigned)ceil_div(w.d.NB, rpc));
  CUDA_CHECK(launch_kernel_ex(fn, grid, block, smem, stream, pdl, w, x, M, ldx, y, ldy, bias, rpc));
}

template <typename Tag, typename OutT, int CONV>
void launch_v2_types(const W4View& w, const void* x, int M, int64_t ldx, void* y, int64_t ldy,
                     const float* bias, cudaStream_t stream, int nw, int rpc, bool pdl) {
  using T = typename Tag::T;
  const bool pair = w.d.gs_shift == 0;
  const size_t smem = v2_smem_bytes(w.d, M, nw);
  const dim3 grid(1), block(32 * nw);  // grid: launch_v2 (from rpc)
  const auto* xp = static_cast<const T*>(x);
  auto* yp = static_cast<OutT*>(y);
  if (M <= 8) {
    if (pair)
      launch_v2(v2_instance<Tag, OutT, CONV, true, 1>(), grid, block, smem, stream, pdl, w, xp, M,
                ldx, yp, ldy, bias, rpc);
    else
      launch_v2(v2_instance<Tag, OutT, CONV, false, 1>(), grid, block, smem, stream, pdl, w, xp, M,
                ldx, yp, ldy, bias, rpc);
  } else {
    if (pair)
      launch_v2(v2_instance<Tag, OutT, CONV, true, 2>(), grid, block, smem, stream, pdl, w, xp, M,
                ldx, yp, ldy, bias, rpc);
    else
      launch_v2(v2_instance<Tag, OutT, CONV, false, 2>(), grid, block, smem, stream, pdl, w, xp, M,
                ldx, yp, ldy, bias, rpc);
  }
}

}  // namespace

bool w4_gemv2_fits(const W4View& w, int M, int warps) {
  if (M < 1 || M > 16 || w.d.sym) return false;
  if (warps == 0) warps = 8;
  return v2_smem_bytes(w.d, M, warps) <= v2_smem_limit();
}

W4Gemv2Config w4_gemv2_default_config(const W4View& w, int M) {
  (void)M;
  W4Gemv2Config c;
  const int sms = device_sm_count();
  c.warps = w.d.NB >= 3 * sms ? 4 : 8;
  c.rows_per_cta = 1;
  return c;
}

void gemv2_init_attributes() {
  v2_instance<F16, float, frag::kFoldMagicF16, false, 1>();
  v2_instance<F16, float, frag::kFoldMagicF16, true, 1>();
  v2_instance<F16, float, frag::kFoldMagicF16, false, 2>();
  v2_instance<F16, float, frag::kFoldMagicF16, true, 2>();
  v2_instance<F16, __half, frag::kFoldMagicF16, false, 1>();
  v2_instance<F16, __half, frag::kFoldMagicF16, true, 1>();
  v2_instance<F16, __half, frag::kFoldMagicF16, false, 2>();
  v2_instance<F16, __half, frag::kFoldMagicF16, true, 2>();
  v2_instance<F16, float, frag::kFoldSubF16, false, 1>();
  v2_instance<F16, float, frag::kFoldSubF16, true, 1>();
  v2_instance<F16, float, frag::kFoldSubF16, false, 2>();
  v2_instance<F16, float, frag::kFoldSubF16, true, 2>();
  v2_instance<F16, __half, frag::kFoldSubF16, false, 1>();
  v2_instance<F16, __half, frag::kFoldSubF16, true, 1>();
  v2_instance<F16, __half, frag::kFoldSubF16, false, 2>();
  v2_instance<F16, __half, frag::kFoldSubF16, true, 2>();
  v2_instance<BF16, float, frag::kFoldMagicBf16, false, 1>();
  v2_instance<BF16, float, frag::kFoldMagicBf16, true, 1>();
  v2_instance<BF16, float, frag::kFoldMagicBf16, false, 2>();
  v2_instance<BF16, float, frag::kFoldMagicBf16, true, 2>();
  v2_instance<BF16, __nv_bfloat16, frag::kFoldMagicBf16, false, 1>();
  v2_instance<BF16, __nv_bfloat16, frag::kFoldMagicBf16, true, 1>();
  v2_instance<BF16, __nv_bfloat16, frag::kFoldMagicBf16, false, 2>();
  v2_instance<BF16, __nv_bfloat16, frag::kFoldMagicBf16, true, 2>();
}

std::string describe_gemv2_kernels() {
  gemv2_init_attributes();
  std::string r;
  const size_t xs1 = (size_t)(64 * 64 + 32) * 2 + 32 * 32 + 2 * 4 * 512;  // M = 1, K = 4096, 4w
  r += describe_kernel(
      "w4_gemv2<f16,f16,magic,nt1>/4w",
      reinterpret_cast<const void*>(w4_gemv2_kernel<F16, __half, frag::kFoldMagicF16, false, 1>),
      128, xs1);
  r += describe_kernel(
      "w4_gemv2<f16,f16,sub,nt1>/4w",
      reinterpret_cast<const void*>(w4_gemv2_kernel<F16, __half, frag::kFoldSubF16, false, 1>), 128,
      xs1);
  r += describe_kernel(
      "w4_gemv2<f16,f32,magic,g32,nt1>/8w",
      reinterpret_cast<const void*>(w4_gemv2_kernel<F16, float, frag::kFoldMagicF16, true, 1>), 256,
      xs1);
  r += describe_kernel("w4_gemv2<bf16,bf16,nt1>/4w",
                       reinterpret_cast<const void*>(
                           w4_gemv2_kernel<BF16, __nv_bfloat16, frag::kFoldMagicBf16, false, 1>),
                       128, xs1);
  const size_t xs16 = (size_t)16 * (64 * 64 + 32) * 2 + 32 * 64 + 2 * 8 * 1024;  // M = 16, 8w
  r += describe_kernel(
      "w4_gemv2<f16,f16,magic,nt2>/8w",
      reinterpret_cast<const void*>(w4_gemv2_kernel<F16, __half, frag::kFoldMagicF16, false, 2>),
      256, xs16);
  return r;
}

void w4_gemv2(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
              int64_t ldy, const float* bias, cudaStream_t stream, const W4Gemv2Config& cfg) {
  check_linear_args("w4_gemv2", w.d.N, w.d.K, x, xt, M, ldx, y, yt, ldy);
  PERFX_CHECK(M <= 16, "w4_gemv2: M = " + std::to_string(M) + " > 16");
  PERFX_CHECK(!w.d.sym, "w4_gemv2: symmetric records (group 32, zeros 8) are not supported");
  if (M == 0) return;
  W4Gemv2Config c = cfg;
  const W4Gemv2Config def = w4_gemv2_default_config(w, M);
  if (c.warps == 0) c.warps = def.warps;
  if (c.rows_per_cta == 0) c.rows_per_cta = def.rows_per_cta;
  PERFX_CHECK(c.warps == 4 || c.warps == 8,
              "w4_gemv2: warps must be 4 or 8, got " + std::to_string(c.warps));
  PERFX_CHECK(c.rows_per_cta >= 1 || c.rows_per_cta == -1,
              "w4_gemv2: rows_per_cta must be >= 1 or -1 (persistent)");
  const size_t smem = v2_smem_bytes(w.d, M, c.warps);
  PERFX_CHECK(smem <= v2_smem_limit(), "w4_gemv2: staged activations need " + std::to_string(smem) +
                                           " bytes of shared memory (> " +
                                           std::to_string(v2_smem_limit()) + "); use w4_gemv");
  const int nw = c.warps, rpc = c.rows_per_cta;
  if (xt == DType::F16) {
    const bool sub = c.f16_subnormal;
    if (yt == DType::F32) {
      if (sub)
        launch_v2_types<F16, float, frag::kFoldSubF16>(w, x, M, ldx, y, ldy, bias, stream, nw, rpc,
                                                       c.pdl);
      else
        launch_v2_types<F16, float, frag::kFoldMagicF16>(w, x, M, ldx, y, ldy, bias, stream, nw,
                                                         rpc, c.pdl);
    } else {
      if (sub)
        launch_v2_types<F16, __half, frag::kFoldSubF16>(w, x, M, ldx, y, ldy, bias, stream, nw, rpc,
                                                        c.pdl);
      else
        launch_v2_types<F16, __half, frag::kFoldMagicF16>(w, x, M, ldx, y, ldy, bias, stream, nw,
                                                          rpc, c.pdl);
    }
  } else {
    if (yt == DType::F32)
      launch_v2_types<BF16, float, frag::kFoldMagicBf16>(w, x, M, ldx, y, ldy, bias, stream, nw,
                                                         rpc, c.pdl);
    else
      launch_v2_types<BF16, __nv_bfloat16, frag::kFoldMagicBf16>(w, x, M, ldx, y, ldy, bias, stream,
                                                                 nw, rpc, c.pdl);
  }
}

}  // namespace perfx::cuda
