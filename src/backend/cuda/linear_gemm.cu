// W4A16 GEMM on tensor cores (prefill and batches, M >= 9), "swap AB" form: the weight is the
// mma A operand (16 rows × 16 k, straight from the packed word after dequantization in
// registers) and the activations the B operand (16 k × 8 tokens), so y[token, row] = C[row, token].
//
// CTA tile: BN rows × BM tokens, one 64-channel chunk per pipeline stage, STAGES stages of
// cp.async (weights quads, the two half-chunk scale/zero records per row block, the activation
// tile zero-filled beyond M and K). Warps: WN along rows × WM along tokens; warp tile
// (BN/WN) rows × (BM/WM) tokens. The activation tile is [BM][8 units of 16 bytes], unit u of row r
// stored at u ^ 4·(r & 1): a lane (gid, tid) reads unit 4h + tid of row gid (its B fragments for
// k-tiles 2h, 2h+1), and the 8 lanes of each quarter-warp phase then hit 8 distinct 16-byte bank
// groups. Split-K over blockIdx.z writes fp32 partials [split][M][N], summed by a second kernel.
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

template <int BN_, int BM_, int WN_, int WM_, int STAGES_, int MIN_CTAS_>
struct TileCfg {
  static constexpr int BN = BN_, BM = BM_, WN = WN_, WM = WM_, STAGES = STAGES_;
  static constexpr int kMinCtas = MIN_CTAS_;  // __launch_bounds__ CTAs per SM (register cap)
  static constexpr int kWarps = WN * WM, kThreads = 32 * kWarps;
  static constexpr int kRB = BN / 16;        // row blocks per CTA tile
  static constexpr int kWRB = BN / WN / 16;  // row blocks per warp
  static constexpr int kWTok = BM / WM;      // tokens per warp
  static constexpr int kWNT = kWTok / 8;     // n8 token tiles per warp
  static constexpr int kWBytes = kRB * 32 * 16;
  static constexpr int kSzBytes = kRB * 2 * 64;
  static constexpr int kXBytes = BM * 128;
  static constexpr int kStageBytes = kWBytes + kSzBytes + kXBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes;
  static_assert(BN % (16 * WN) == 0 && BM % (8 * WM) == 0, "tile not divisible by warps");
  static_assert(kStageBytes % 16 == 0, "stage must keep 16-byte alignment");
};

// The tile table (one place; linear.cuh's W4GemmTile comments mirror it).
//                     BN   BM WN WM stages ctas/SM
using CfgS32 = TileCfg<64, 32, 4, 1, 6, 4>;      // warp 16 rows × 32 tokens; 39 KB smem
using CfgS64 = TileCfg<64, 64, 2, 2, 5, 4>;      // warp 32 × 32; 52.5 KB
using CfgL128 = TileCfg<128, 128, 4, 2, 4, 2>;   // warp 32 × 64; 84 KB
using CfgL128R = TileCfg<128, 128, 2, 4, 4, 2>;  // warp 64 × 32 (less smem traffic, 2x dequant)

template <typename Cfg, typename Tag, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinCtas)
    w4_gemm_kernel(W4View w, const typename Tag::T* __restrict__ x, int M, int64_t ldx,
                   OutT* __restrict__ y, int64_t ldy, const float* __restrict__ bias,
                   float* __restrict__ ws, int chunks_per_split) {
  using T = typename Tag::T;
  constexpr int kRB = Cfg::kRB, kWRB = Cfg::kWRB, kWNT = Cfg::kWNT, BM = Cfg::BM;
  constexpr int kThreads = Cfg::kThreads, STAGES = Cfg::STAGES;
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_wait();  // (a no-op unless launched with PERFX_CUDA_PDL_GEMM=1)

  const int t_blk = threadIdx.x;
  const int warp = t_blk >> 5, lane = t_blk & 31, gid = lane >> 2, tid = lane & 3;
  const int wn = warp % Cfg::WN, wm = warp / Cfg::WN;
  const int64_t rb0 = (int64_t)blockIdx.x * kRB;
  const int m0 = blockIdx.y * BM;
  const int split = blockIdx.z;
  const int KC = w.d.KC, NB = w.d.NB, G = w.d.G, gs_shift = w.d.gs_shift;
  const bool sym = w.d.sym;
  const int64_t K = w.d.K, N = w.d.N;
  const int kc_begin = split * chunks_per_split;
  const int kc_end = min(KC, kc_begin + chunks_per_split);
  const int n_iters = max(0, kc_end - kc_begin);

  auto stage_w = [&](int s) { return reinterpret_cast<uint4*>(smem + s * Cfg::kStageBytes); };
  auto stage_sz = [&](int s) {
    return reinterpret_cast<uint4*>(smem + s * Cfg::kStageBytes + Cfg::kWBytes);
  };
  auto stage_x = [&](int s) {
    return reinterpret_cast<uint4*>(smem + s * Cfg::kStageBytes + Cfg::kWBytes + Cfg::kSzBytes);
  };

  auto load_stage = [&](int s, int kc) {
    uint4* sw = stage_w(s);
    for (int i = t_blk; i < kRB * 32; i += kThreads) {
      const int64_t nb = rb0 + (i >> 5);
      const bool ok = nb < NB;
      frag::cp_async16(sw + i, ok ? w.q + frag::w4_q_index(KC, nb, kc, i & 31) : w.q, ok);
    }
    // Records (rb, h) of 64 bytes = 4 pieces, at uint4 index (2rb + h)·4 + piece = i (symmetric
    // records: the chunk's one record in both).
    uint4* ssz = stage_sz(s);
    for (int i = t_blk; i < kRB * 8; i += kThreads) {
      const int64_t nb = rb0 + (i >> 3);
      const int h = (i >> 2) & 1, piece = i & 3;
      const bool ok = nb < NB;
      const int64_t rec = frag::w4_rec_index(G, gs_shift, sym, nb, 2 * (int64_t)kc + h, 0);
      const uint4* src = ok ? reinterpret_cast<const uint4*>(w.sz + rec) + piece
                            : reinterpret_cast<const uint4*>(w.sz);
      frag::cp_async16(ssz + i, src, ok);
    }
    uint4* sx = stage_x(s);
    for (int i = t_blk; i < BM * 8; i += kThreads) {
      const int r = i >> 3, u = i & 7;
      const int m = m0 + r;
      const int64_t k = (int64_t)kc * 64 + 8 * u;
      const bool ok = m < M && k < K;
      frag::cp_async16(sx + r * 8 + (u ^ ((r & 1) << 2)), ok ? x + (int64_t)m * ldx + k : x, ok);
    }
  };

  float acc[kWRB][kWNT][4];
#pragma unroll
  for (int i = 0; i < kWRB; ++i)
#pragma unroll
    for (int j = 0; j < kWNT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_iters) load_stage(s, kc_begin + s);
    frag::cp_async_commit();
  }

  for (int it = 0; it < n_iters; ++it) {
    frag::cp_async_wait<STAGES - 2>();
    __syncthreads();
    {  // refill the slot consumed in iteration it - 1 (every thread is past it: the barrier)
      const int nxt = it + STAGES - 1;
      if (nxt < n_iters) load_stage(nxt % STAGES, kc_begin + nxt);
      frag::cp_async_commit();
    }
    const int s = it % STAGES;
    const uint4* sw = stage_w(s);
    const uint2* ssz = reinterpret_cast<const uint2*>(stage_sz(s));
    const uint4* sx = stage_x(s);

    uint4 wq[kWRB];
    uint32_t z_lo[kWRB][2], z_hi[kWRB][2], s_lo[kWRB][2], s_hi[kWRB][2];
#pragma unroll
    for (int i = 0; i < kWRB; ++i) {
      const int rb = wn * kWRB + i;
      wq[i] = sw[rb * 32 + lane];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 r = frag::w4_rec_of_half(ssz[(rb * 2 + h) * 8 + gid], sym, h);
        const uint32_t zl = r.y & 0xFu, zh = (r.y >> 8) & 0xFu;
        if constexpr (std::is_same_v<Tag, F16>) {
          z_lo[i][h] = frag::f16_neg_zero_lo(zl);
          z_hi[i][h] = frag::f16_neg_zero_hi(zh);
          s_lo[i][h] = __byte_perm(r.x, 0u, 0x1010u);  // (scale gid, scale gid)
          s_hi[i][h] = __byte_perm(r.x, 0u, 0x3232u);  // (scale gid+8, scale gid+8)
        } else {
          z_lo[i][h] = frag::bf16_neg_zero(zl);
          z_hi[i][h] = frag::bf16_neg_zero(zh);
          const __nv_bfloat162 bl = __float2bfloat162_rn(frag::f16_lo(r.x));
          const __nv_bfloat162 bh = __float2bfloat162_rn(frag::f16_hi(r.x));
          s_lo[i][h] = *reinterpret_cast<const uint32_t*>(&bl);
          s_hi[i][h] = *reinterpret_cast<const uint32_t*>(&bh);
        }
      }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 xb[kWNT];
#pragma unroll
      for (int nt = 0; nt < kWNT; ++nt) {
        const int row = wm * Cfg::kWTok + nt * 8 + gid;  // row & 1 == gid & 1
        xb[nt] = sx[row * 8 + ((4 * h + tid) ^ ((row & 1) << 2))];
      }
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
#pragma unroll
        for (int i = 0; i < kWRB; ++i) {
          const uint32_t word = (2 * h + jj) == 0   ? wq[i].x
                                : (2 * h + jj) == 1 ? wq[i].y
                                : (2 * h + jj) == 2 ? wq[i].z
                                                    : wq[i].w;
          uint32_t a[4];
          if constexpr (std::is_same_v<Tag, F16>) {
            frag::w4_word_to_frag_f16(word, z_lo[i][h], z_hi[i][h], a);
            a[0] = frag::f16x2_mul(a[0], s_lo[i][h]);
            a[1] = frag::f16x2_mul(a[1], s_hi[i][h]);
            a[2] = frag::f16x2_mul(a[2], s_lo[i][h]);
            a[3] = frag::f16x2_mul(a[3], s_hi[i][h]);
          } else {
            frag::w4_word_to_frag_bf16(word, z_lo[i][h], z_hi[i][h], a);
            a[0] = frag::bf16x2_mul(a[0], s_lo[i][h]);
            a[1] = frag::bf16x2_mul(a[1], s_hi[i][h]);
            a[2] = frag::bf16x2_mul(a[2], s_lo[i][h]);
            a[3] = frag::bf16x2_mul(a[3], s_hi[i][h]);
          }
#pragma unroll
          for (int nt = 0; nt < kWNT; ++nt)
            frag::mma16816<Tag>(acc[i][nt], a, jj == 0 ? xb[nt].x : xb[nt].z,
                                jj == 0 ? xb[nt].y : xb[nt].w);
        }
      }
    }
  }
  frag::cp_async_wait<0>();
  pdl_trigger();

  // Epilogue: acc[i][nt][c] is (row gid + 8(c >> 1), token 2tid + (c & 1)) of the mma tile.
#pragma unroll
  for (int i = 0; i < kWRB; ++i) {
#pragma unroll
    for (int nt = 0; nt < kWNT; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t row = (rb0 + wn * kWRB + i) * 16 + gid + 8 * (c >> 1);
        const int token = m0 + wm * Cfg::kWTok + nt * 8 + 2 * tid + (c & 1);
        if (row < N && token < M) {
          if (ws != nullptr) {
            ws[((int64_t)split * M + token) * N + row] = acc[i][nt][c];
          } else {
            // nc-ok: bias: a weight, immutable
            const float v = acc[i][nt][c] + (bias != nullptr ? bias[row] : 0.f);
            y[(int64_t)token * ldy + row] = frag::to_out<OutT>(v);
          }
        }
      }
    }
  }
}

/// ws holds the split-K partials of the w4_gemm_kernel just before (its PDL predecessor under
/// PERFX_CUDA_PDL_GEMM=1), so it is read coherently (pdl.cuh): no __restrict__.
template <typename OutT>
__global__ void splitk_reduce_kernel(const float* ws, int S, int M, int64_t N, OutT* __restrict__ y,
                                     int64_t ldy, const float* __restrict__ bias) {
  pdl_enter();
  const int64_t total = (int64_t)M * N;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t m = i / N, n = i - m * N;
    float s = 0.f;
    for (int z = 0; z < S; ++z) s += ws[z * total + i];
    // nc-ok: bias: a weight, immutable
    if (bias != nullptr) s += bias[n];
    y[m * ldy + n] = frag::to_out<OutT>(s);
  }
}

/// Chunks per split and the effective split count for a requested split_k.
void split_shape(int KC, int split_k, int& cps, int& splits) {
  const int s = max(1, min(split_k, KC));
  cps = ceil_div(KC, s);
  splits = ceil_div(KC, cps);
}

/// Raises the instance's dynamic shared-memory limit once per process (see linear_kernels_init).
template <typename Cfg, typename Tag, typename OutT>
void ensure_smem_attr() {
  static std::once_flag once;
  std::call_once(once, [] {
    CUDA_CHECK(cudaFuncSetAttribute(w4_gemm_kernel<Cfg, Tag, OutT>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  });
}

template <typename Cfg, typename Tag, typename OutT>
void launch_gemm(const W4View& w, int split_k, const void* x, int M, int64_t ldx, void* y,
                 int64_t ldy, const float* bias, void* ws, size_t ws_bytes, cudaStream_t stream) {
  auto kernel = w4_gemm_kernel<Cfg, Tag, OutT>;
  ensure_smem_attr<Cfg, Tag, OutT>();
  // The GEMM kernels are launched without PDL unless PERFX_CUDA_PDL_GEMM=1: with it, batch-64
  // decode ran 10 % slower (trigger at entry or after the main loop alike;
  // docs/cuda_linear_notes.md §10). Either way the kernel triggers after its main loop, so a
  // PDL-launched successor may start during its epilogue (the measured configuration), and it
  // keeps the PDL contract.
  static const bool gemm_pdl = env_is("PERFX_CUDA_PDL_GEMM", "1");
  const bool pdl = pdl_enabled() && gemm_pdl;
  int cps = 0, splits = 0;
  split_shape(w.d.KC, split_k, cps, splits);
  const dim3 grid((unsigned)ceil_div(w.d.NB, Cfg::kRB), (unsigned)ceil_div(M, Cfg::BM),
                  (unsigned)splits);
  const auto* xt = static_cast<const typename Tag::T*>(x);
  if (splits == 1) {
    (void)launch_kernel_ex(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, pdl, w, xt,
                           M, ldx, static_cast<OutT*>(y), ldy, bias, static_cast<float*>(nullptr),
                           cps);
    CUDA_CHECK_LAUNCH("w4_gemm_kernel");
    return;
  }
  const size_t need = (size_t)splits * M * w.d.N * sizeof(float);
  PERFX_CHECK(ws != nullptr && ws_bytes >= need, "w4_gemm: split-K workspace of " +
                                                     std::to_string(ws_bytes) + " bytes, need " +
                                                     std::to_string(need));
  float* part = static_cast<float*>(ws);
  (void)launch_kernel_ex(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, pdl, w, xt, M,
                         ldx, static_cast<OutT*>(y), ldy, bias, part, cps);
  CUDA_CHECK_LAUNCH("w4_gemm_kernel (split)");
  const int64_t total = (int64_t)M * w.d.N;
  const int blocks = (int)std::min<int64_t>(ceil_div<int64_t>(total, 256), 4 * 1024);
  (void)launch_kernel_ex(splitk_reduce_kernel<OutT>, dim3(blocks), dim3(256), 0, stream, pdl,
                         static_cast<const float*>(part), splits, M, w.d.N, static_cast<OutT*>(y),
                         ldy, bias);
  CUDA_CHECK_LAUNCH("splitk_reduce_kernel");
}

template <typename Cfg>
void dispatch_types(const W4View& w, int split_k, const void* x, DType xt, int M, int64_t ldx,
                    void* y, DType yt, int64_t ldy, const float* bias, void* ws, size_t ws_bytes,
                    cudaStream_t stream) {
  if (xt == DType::F16) {
    if (yt == DType::F32)
      launch_gemm<Cfg, F16, float>(w, split_k, x, M, ldx, y, ldy, bias, ws, ws_bytes, stream);
    else
      launch_gemm<Cfg, F16, __half>(w, split_k, x, M, ldx, y, ldy, bias, ws, ws_bytes, stream);
  } else {
    if (yt == DType::F32)
      launch_gemm<Cfg, BF16, float>(w, split_k, x, M, ldx, y, ldy, bias, ws, ws_bytes, stream);
    else
      launch_gemm<Cfg, BF16, __nv_bfloat16>(w, split_k, x, M, ldx, y, ldy, bias, ws, ws_bytes,
                                            stream);
  }
}

template <typename Cfg>
void init_cfg() {
  ensure_smem_attr<Cfg, F16, float>();
  ensure_smem_attr<Cfg, F16, __half>();
  ensure_smem_attr<Cfg, BF16, float>();
  ensure_smem_attr<Cfg, BF16, __nv_bfloat16>();
}

template <typename Cfg>
std::string describe_cfg(const char* name) {
  const std::string n(name);
  return describe_kernel((n + "<f16,f32>").c_str(),
                         reinterpret_cast<const void*>(w4_gemm_kernel<Cfg, F16, float>),
                         Cfg::kThreads, Cfg::kSmemBytes) +
         describe_kernel((n + "<f16,f16>").c_str(),
                         reinterpret_cast<const void*>(w4_gemm_kernel<Cfg, F16, __half>),
                         Cfg::kThreads, Cfg::kSmemBytes) +
         describe_kernel((n + "<bf16,f32>").c_str(),
                         reinterpret_cast<const void*>(w4_gemm_kernel<Cfg, BF16, float>),
                         Cfg::kThreads, Cfg::kSmemBytes) +
         describe_kernel((n + "<bf16,bf16>").c_str(),
                         reinterpret_cast<const void*>(w4_gemm_kernel<Cfg, BF16, __nv_bfloat16>),
                         Cfg::kThreads, Cfg::kSmemBytes);
}

}  // namespace

void gemm_init_attributes() {
  init_cfg<CfgS32>();
  init_cfg<CfgS64>();
  init_cfg<CfgL128>();
  init_cfg<CfgL128R>();
}

std::string describe_gemm_kernels() {
  gemm_init_attributes();
  return describe_cfg<CfgS32>("w4_gemm_s32") + describe_cfg<CfgS64>("w4_gemm_s64") +
         describe_cfg<CfgL128>("w4_gemm_l128") + describe_cfg<CfgL128R>("w4_gemm_l128r");
}

const char* w4_gemm_tile_name(W4GemmTile t) {
  switch (t) {
    case W4GemmTile::S32:
      return "gemm_s32";
    case W4GemmTile::S64:
      return "gemm_s64";
    case W4GemmTile::L128:
      return "gemm_l128";
    case W4GemmTile::L128R:
      return "gemm_l128r";
  }
  return "?";
}

int w4_gemm_split_k(const W4View& w, W4GemmTile tile, int M) {
  if (tile == W4GemmTile::L128 || tile == W4GemmTile::L128R || M <= 0) return 1;
  const int bm = tile == W4GemmTile::S32 ? CfgS32::BM : CfgS64::BM;
  const int64_t tiles = (int64_t)ceil_div(w.d.NB, CfgS32::kRB) * ceil_div(M, bm);
  const int64_t target = 2 * (int64_t)device_sm_count();
  int s = (int)std::min<int64_t>(ceil_div<int64_t>(target, tiles), 16);
  s = std::min(s, w.d.KC / 8);
  s = std::max(s, 1);
  int cps = 0, splits = 0;
  split_shape(w.d.KC, s, cps, splits);
  return splits;
}

size_t w4_gemm_workspace_bytes(const W4View& w, int M, int split_k) {
  int cps = 0, splits = 0;
  split_shape(w.d.KC, split_k, cps, splits);
  if (splits <= 1 || M <= 0) return 0;
  return (size_t)splits * M * w.d.N * sizeof(float);
}

void w4_gemm(const W4View& w, W4GemmTile tile, int split_k, const void* x, DType xt, int M,
             int64_t ldx, void* y, DType yt, int64_t ldy, const float* bias, void* ws,
             size_t ws_bytes, cudaStream_t stream) {
  check_linear_args("w4_gemm", w.d.N, w.d.K, x, xt, M, ldx, y, yt, ldy);
  PERFX_CHECK(split_k >= 1, "w4_gemm: split_k = " + std::to_string(split_k) + " < 1");
  if (M == 0) return;
  PERFX_CHECK(M <= 65535 * 32, "w4_gemm: M = " + std::to_string(M) + " too large");
  switch (tile) {
    case W4GemmTile::S32:
      dispatch_types<CfgS32>(w, split_k, x, xt, M, ldx, y, yt, ldy, bias, ws, ws_bytes, stream);
      break;
    case W4GemmTile::S64:
      dispatch_types<CfgS64>(w, split_k, x, xt, M, ldx, y, yt, ldy, bias, ws, ws_bytes, stream);
      break;
    case W4GemmTile::L128:
      dispatch_types<CfgL128>(w, split_k, x, xt, M, ldx, y, yt, ldy, bias, ws, ws_bytes, stream);
      break;
    case W4GemmTile::L128R:
      dispatch_types<CfgL128R>(w, split_k, x, xt, M, ldx, y, yt, ldy, bias, ws, ws_bytes, stream);
      break;
  }
}

}  // namespace perfx::cuda
