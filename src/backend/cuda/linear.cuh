// Linear-layer kernels of the CUDA backend: int4 (W4A16: AWQ, GGUF Q4_0) and int8 (GGUF Q8_0)
// group-quantized weights times fp16/bf16 activations, on tensor cores (mma.sync m16n8k16, sm_80+;
// also what runs on sm_90). One device layout per weight kind serves every kernel of that kind.
//
//   y [M, N] (fp16/bf16 like x, or fp32) = x [M, K] · Wᵀ (+ bias [N], fp32)
//
// Kernels (docs/cuda_linear_notes.md has the numbers):
//   w4_gemv        M = 1..8      weights streamed to registers, dequantized there, fed to mma as A
//   w4_gemv2       M = 1..16     zero point folded out, x staged in shared memory (opt-in)
//   w4_gemv3       M = 1..8      v1's math, lean per-chunk code, split-K warps (decode default on
//                                matrices of >= 16M weights)
//   w4_gemm S32    M = 9..32     cp.async multi-stage tiles, split-K over CTAs when N is small
//   w4_gemm S64    M = 33..64
//   w4_gemm L128   M >= 65       128x128 tiles
//   w4_dequantize  any M         whole matrix to fp16/bf16 [N, K] for the caller's dense GEMM
//   w8_gemv / w8_dequantize      the same two roles for Q8_0
// linear_w4a16 / linear_w8a16 pick one by M (the ladder in w4a16_plan / w8a16_plan).
//
// Everything on the launch path is CUDA-graph capturable: no allocation, no synchronization, no
// device-to-host copies; the caller preallocates the workspace (linear_workspace_bytes).
//
// Host API conventions: dtypes are perfx::DType (x: F16 or BF16; y: F32 or x's dtype); strides
// are in elements; errors (bad shapes, unsupported dtypes, too small a workspace, CUDA failures)
// throw perfx::Error with one line naming the problem.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/l2_prefetch_plan.h"
#include "core/dtype.h"
#include "core/quantized.h"

namespace perfx::cuda {

// =============================================================================== W4 layout
//
// Built from canonical Int4Matrix parts stacked by output rows (FORMATS.md §1.8 / §2; the loader
// decodes AutoAWQ GEMM/GEMV and GGUF Q4_0 into Int4Matrix). Rows are padded to NB = ceil(N/16)
// row blocks of 16, input channels to KC = ceil(K/64) chunks of 64 (padding: q = 0 and scale = 0,
// so padded weights are exactly 0 whatever the zero (0 stored, or 8 implied by symmetric
// records); w4_gemv, the GEMM and the dequantize kernel zero-fill or skip x beyond K, w4_gemv3
// leaves stale finite registers there and relies on those zero scales).
//
// q: uint4 [NB][KC][32]: one 16-byte word quad per (row block nb, chunk kc, lane l), lane
//   l = 4·gid + tid (gid 0..7, tid 0..3, the mma "groupID"/"threadID_in_group"). Word j (0..3) of
//   the quad is the mma.m16n8k16 A fragment of lane l for k-tile j of the chunk: its 8 nibbles hold
//   elements e0..e7 with nibble i holding e[{0,2,4,6,1,3,5,7}[i]] (the AWQ interleave, so the
//   lop3 / 0x6400 conversion yields the pairs (e0,e1), (e2,e3), (e4,e5), (e6,e7) in order), and
//     e0,e1 = W[16nb + gid    ][b + 0], W[..][b + 1]     (A regs 0: row gid,   mma k 2tid, 2tid+1)
//     e2,e3 = W[16nb + gid + 8][b + 0], W[..][b + 1]     (A regs 1: row gid+8)
//     e4,e5 = W[16nb + gid    ][b + 2], W[..][b + 3]     (A regs 2: row gid,   mma k 2tid+8, +9)
//     e6,e7 = W[16nb + gid + 8][b + 2], W[..][b + 3]     (A regs 3: row gid+8)
//   with b = 64kc + 32·(j/2) + 8·tid + 4·(j%2). So the mma's 16 k positions of k-tile j map to 16
//   distinct real input channels (a permutation the activations follow), and lane l's B
//   fragments for the whole chunk are x[token gid][64kc + 8tid .. +7] and [64kc + 32 + 8tid .. +7]:
//   two 16-byte loads from a row-major activation row. k-tiles 0,1 lie in the chunk's first 32
//   channels and 2,3 in the second 32, so groups of 32 (GGUF) never straddle a k-tile pair.
// sz: uint2 [NB][G][8] with G = ceil(64·KC / group_size) (scale/zero records; symmetric ones
//   below): entry (nb, g, gid) =
//   .x = fp16 bits scale[16nb + gid][g] | scale[16nb + gid + 8][g] << 16
//   .y = zero[16nb + gid][g] | zero[16nb + gid + 8][g] << 8      (zeros in 0..15, upper bits 0)
//   Weight value: W = (q − zero) · scale, as Int4Matrix::dequant.
// group_size must be a power of two >= 32 dividing K (32, 64, 128, 256, ...). Q4_1 (`mins`) is not
// supported (pack_w4 throws; the backend falls back to dense fp16 for it).
// Symmetric records (W4Dims::sym: group 32 with every zero 8, as GGUF Q4_0 is): G = KC records
//   per row, one per chunk: entry (nb, kc, gid) =
//     .x = fp16 bits scale[16nb + gid][2kc]     | scale[16nb + gid + 8][2kc] << 16
//     .y = fp16 bits scale[16nb + gid][2kc + 1] | scale[16nb + gid + 8][2kc + 1] << 16
//   (group index = 32-channel half-chunk); the zeros are all 8 and not stored. A padded second
//   half (K % 64 = 32) has .y = 0. sz then costs 0.5 bit a weight instead of 1 (the 4.5 bits of
//   GGUF Q4_0 instead of 5); frag::w4_rec_index / w4_rec_of_half turn either kind into the record
//   of a half-chunk.

/// Shape of a packed W4 matrix.
struct W4Dims {
  int64_t N = 0, K = 0;  // logical rows (out) and input channels (in)
  int NB = 0, KC = 0;    // row blocks of 16 and k chunks of 64 (padded)
  int G = 0;             // scale/zero records per row over the padded K (groups; sym: chunks)
  int group_size = 0;    // 32 << gs_shift
  int gs_shift = 0;      // log2(group_size / 32)
  bool sym = false;      // symmetric records (group 32, zeros 8): G = KC, see above
  size_t q_bytes() const { return (size_t)NB * KC * 32 * 16; }
  size_t sz_bytes() const { return (size_t)NB * G * 8 * 8; }
};

/// Kernel view of a device W4 matrix (trivially copyable; pointers into one allocation).
struct W4View {
  W4Dims d;
  const uint4* q = nullptr;   // [NB][KC][32]
  const uint2* sz = nullptr;  // [NB][G][8]
};

/// Host image of the layout above (what W4Weight::upload copies to the device).
struct W4Packed {
  W4Dims d;
  std::vector<uint32_t> q;   // q_bytes() / 4 words
  std::vector<uint32_t> sz;  // sz_bytes() / 4 words (x, y pairs)
};

/// Row order of a packed multi-part matrix.
enum class W4RowOrder {
  kStacked,      // part 0's rows first, then part 1's, ...
  kInterleave8,  // two parts of equal `out`, a multiple of 8 (gate, up): row block b holds rows
                 // 8b..8b+7 of part 0 in rows 0..7 and of part 1 in rows 8..15, so one mma
                 // tile's rows gid and gid + 8 are a SwiGLU pair (packed row w4_interleave_row)
};
/// Packed row of row `lr` of part `part` under kInterleave8.
inline int64_t w4_interleave_row(int part, int64_t lr) {
  return 16 * (lr / 8) + 8 * part + lr % 8;
}

/// Packs parts by output rows in `order`. All parts must share `in` and group_size (a power of
/// two >= 32 dividing `in`), have no `mins`, consistent vector sizes and zeros <= 15; kInterleave8
/// also needs exactly two parts of equal `out`, a multiple of 8. Group 32 with every zero 8 (GGUF
/// Q4_0) gets symmetric records (W4Dims::sym) unless `allow_sym` is false. Throws perfx::Error
/// naming the first violation.
W4Packed pack_w4(const std::vector<const Int4Matrix*>& parts,
                 W4RowOrder order = W4RowOrder::kStacked, bool allow_sym = true);
/// q[r, k] read back from the packed image (tests; r < N, k < K).
uint32_t w4_packed_value(const W4Packed& p, int64_t r, int64_t k);
/// W[r, k] = (q − zero) · scale in fp32 from the packed image (tests).
float w4_packed_dequant(const W4Packed& p, int64_t r, int64_t k);

/// A W4 matrix in device memory (one cudaMalloc, freed by the destructor). Move-only.
class W4Weight {
 public:
  W4Weight() = default;
  ~W4Weight();
  W4Weight(W4Weight&& o) noexcept;
  W4Weight& operator=(W4Weight&& o) noexcept;
  W4Weight(const W4Weight&) = delete;
  W4Weight& operator=(const W4Weight&) = delete;

  /// Uploads a packed image (synchronous cudaMemcpy). Throws perfx::Error on CUDA failure; out
  /// of memory names `what`, the bytes needed and the bytes free.
  static W4Weight upload(const W4Packed& p, const std::string& what = "a W4 weight");
  /// pack_w4 + upload.
  static W4Weight from_parts(const std::vector<const Int4Matrix*>& parts,
                             W4RowOrder order = W4RowOrder::kStacked);

  const W4View& view() const { return v_; }
  int64_t out() const { return v_.d.N; }
  int64_t in() const { return v_.d.K; }
  /// Device bytes read by a full pass over the weight: q + sz (what the GB/s figures count).
  size_t bytes() const { return v_.d.q_bytes() + v_.d.sz_bytes(); }

 private:
  W4View v_{};
  void* mem_ = nullptr;
};

// =============================================================================== W8 layout
//
// GGUF Q8_0 (Int8Matrix, W = q · scale, group 32 by default; any power of two >= 32 accepted).
// Rows padded to NB = ceil(N/16) blocks, K in KC = K/32 chunks of 32 (K must be a multiple of 32).
// q: uint4 [NB][KC][32]: lane l = 4·gid + tid holds two k-tiles jj = 0, 1 (words 2jj, 2jj+1), with
//   b = 32kc + 8tid + 4jj and bytes stored as q + 128 (q XOR 0x80):
//     word 2jj   = { W[gid][b], W[gid][b+1], W[gid+8][b], W[gid+8][b+1] }   (A regs 0, 1)
//     word 2jj+1 = { W[gid][b+2], W[gid][b+3], W[gid+8][b+2], W[gid+8][b+3] } (A regs 2, 3)
//   (rows relative to 16nb; byte 0 lowest). Same k permutation as W4 (lane's x: 16 bytes at
//   x[gid][32kc + 8tid]).
// s: uint32 [NB][G][8]: fp16 bits scale[16nb + gid][g] | scale[16nb + gid + 8][g] << 16.

struct W8Dims {
  int64_t N = 0, K = 0;
  int NB = 0, KC = 0;  // row blocks of 16, k chunks of 32
  int G = 0;           // groups per row
  int group_size = 0, gs_shift = 0;
  size_t q_bytes() const { return (size_t)NB * KC * 32 * 16; }
  size_t s_bytes() const { return (size_t)NB * G * 8 * 4; }
};

struct W8View {
  W8Dims d;
  const uint4* q = nullptr;     // [NB][KC][32]
  const uint32_t* s = nullptr;  // [NB][G][8]
};

struct W8Packed {
  W8Dims d;
  std::vector<uint32_t> q;  // q_bytes() / 4 words
  std::vector<uint32_t> s;  // s_bytes() / 4 words
};

/// Packs Int8Matrix parts stacked by output rows; same rules as pack_w4 (shared `in` and
/// group_size, a power of two >= 32; `in` a multiple of the group size). Throws perfx::Error.
W8Packed pack_w8(const std::vector<const Int8Matrix*>& parts);
/// q[r, k] (int8) read back from the packed image (tests).
int w8_packed_value(const W8Packed& p, int64_t r, int64_t k);

class W8Weight {
 public:
  W8Weight() = default;
  ~W8Weight();
  W8Weight(W8Weight&& o) noexcept;
  W8Weight& operator=(W8Weight&& o) noexcept;
  W8Weight(const W8Weight&) = delete;
  W8Weight& operator=(const W8Weight&) = delete;

  /// As W4Weight::upload.
  static W8Weight upload(const W8Packed& p, const std::string& what = "a W8 weight");
  static W8Weight from_parts(const std::vector<const Int8Matrix*>& parts);

  const W8View& view() const { return v_; }
  int64_t out() const { return v_.d.N; }
  int64_t in() const { return v_.d.K; }
  size_t bytes() const { return v_.d.q_bytes() + v_.d.s_bytes(); }

 private:
  W8View v_{};
  void* mem_ = nullptr;
};

// =============================================================================== kernels
//
// Common preconditions (checked; perfx::Error otherwise): x is F16 or BF16, 16-byte aligned, with
// ldx a multiple of 8 and ldx >= K; y is F32 or x's dtype, element-aligned, ldy >= N; bias is null
// or fp32 [N]; M >= 0 (M == 0 launches nothing). x must not alias y. Only y[m, 0..N) for m < M is
// written; x[m, 0..K) for m < M is read. All launches go to `stream` and are checked with
// cudaGetLastError.

/// What w4_gemv does beside y = x·Wᵀ (+ bias) in the two halves of the fused decode pair
/// linear → add + RMSNorm → linear (Backend::linear_add_rms_norm_linear; docs/cuda_linear_notes.md
/// §30). Empty (both pointers null): nothing.
///  * `residual` set (the producer): y is not written; instead residual[m, n] (xt, row stride
///    ldr >= N) becomes round(residual[m, n] + round(y[m, n])), add_rms_norm's sum bit for bit.
///    Needs yt == xt. Each element is read (after the PDL wait) and written by the thread that
///    computes it.
///  * `gamma` set (the consumer): x is the residual s [M, K] (already summed) and the GEMV's input
///    is γ ⊙ s · rsqrt(mean(s²) + eps), rounded to xt, computed into shared memory after the PDL
///    wait with the vectorized rms_norm kernel's thread mapping and arithmetic (norm_math.cuh), so
///    bit for bit its output. x is then always staged in shared memory, whatever x_smem says (M ·
///    (K + 32) · 2 bytes, at most 66 KB). gamma: fp32 [K], 16-byte aligned, read before the PDL
///    wait (a weight). Needs K % 8 == 0, K <= 4096, and 32 · warps >= norm_vec_threads(K / 8)
///    (256 from K = 2048). Formula: RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467).
/// Errors: perfx::Error when both are set or a need above is not met.
struct GemvNormLink {
  void* residual = nullptr;
  int64_t ldr = 0;
  const float* gamma = nullptr;
  float eps = 0.f;
};

/// W4A16 GEMV, M = 1..8 tokens. Grid: one CTA per 16-row block; `warps` (4, 8 or 16; 0 = default
/// 8) warps split K, partial sums reduced through shared memory. x_smem: stage x in shared memory
/// (then 8 chunks in flight per lane, else 4 with x in registers) when its M · (64·KC + 32) · 2
/// bytes are <= 32 KB (-1, default), <= 96 KB (1), never (0); with a GemvNormLink consumer, always.
/// Numerics: per (row, token, 32-channel half-chunk) the mma sums (q − zero)·x exactly in fp32
/// (integers times fp16/bf16 are exact in fp32), then acc += scale · partial in fp32: error is fp32
/// summation only (~1e-6 relative), independent of the activation type. pf: the next linear's
/// first bytes, read into L2 before the kernel's PDL wait (L2Prefetch; none by default).
///
/// link (GemvNormLink): the decode pair of Backend::linear_add_rms_norm_linear fused around the
/// norm (docs/cuda_linear_notes.md §30); empty by default.
void w4_gemv(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
             int64_t ldy, const float* bias, cudaStream_t stream, int warps = 0, int x_smem = -1,
             const L2Prefetch& pf = {}, const GemvNormLink& link = GemvNormLink{});

/// Configuration of w4_gemv2 (0 = the default rule w4_gemv2_default_config).
struct W4Gemv2Config {
  int warps = 0;               // 4 or 8 warps per CTA, splitting K in group-aligned ranges
  int rows_per_cta = 0;        // row blocks (16 rows) per CTA, >= 1; -1 = one wave (persistent)
  bool f16_subnormal = false;  // fp16: exact subnormal conversion instead of the 1024 magic
  bool pdl = false;            // launch with programmatic dependent launch (sm_90)
};
/// W4A16 GEMV v2, M = 1..16 (docs/cuda_linear_notes.md §2): zero point folded out of the
/// conversion (Σ(q−z)x = A·Σ frag(q)·x − (B+z)·Σx, one correction per group with the group's
/// activation sums), 8 weight quads per lane always in flight across row blocks, x staged in
/// shared memory (so M·(64·KC + 32)·2 bytes + sums must fit in 200 KB: w4_gemv2_fits).
/// Numerics: exact products in fp32; with the fp16 magic conversion the mma sums carry a
/// 1024·Σx offset (rounding relative to ~1024·Σ|x| per group: ~1e-5..1e-4 of ‖y‖); bf16 a 128·Σx
/// offset; the fp16 subnormal conversion is offset-free (as w4_gemv, ~1e-6). Throws perfx::Error
/// for symmetric records (W4Dims::sym: the dispatch gives those to w4_gemv / w4_gemv3).
void w4_gemv2(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
              int64_t ldy, const float* bias, cudaStream_t stream, const W4Gemv2Config& cfg = {});
/// Whether w4_gemv2 can run (M <= 16, records not symmetric, and the staged activations fit)
/// with `warps` (0: 8, the larger reduction buffer).
bool w4_gemv2_fits(const W4View& w, int M, int warps = 0);
/// The configuration w4_gemv2 uses for zero fields: 4 warps when NB >= 3·SMs, else 8; one row
/// block per CTA.
W4Gemv2Config w4_gemv2_default_config(const W4View& w, int M);

/// Int8 activations for w4_gemv3's W4A8 variant (W4Gemv3Config::a8), made by quantize_act_q8:
/// q [M, K] int8 (row stride K; each 4 channels stored in the order 0, 2, 1, 3, the byte order of
/// the W4 layout's A fragments), meta [M, K / group] = {fp32 bits of the scale d, Σ q} per group:
/// x ≈ d · q with d = max|x| / 127, q = round(x / d) (GGUF Q8_0's rule at the weight's group).
struct W4A8Act {
  const int8_t* q = nullptr;  // null: fp16/bf16 activations (W4A16)
  const int2* meta = nullptr;
};

/// Configuration of w4_gemv3 (zeros = the default rule).
struct W4Gemv3Config {
  int split = 0;     // warps splitting one row block's K: 1, 2, 4 or 8 (0: w4_gemv3_default_split)
  int grid_cap = 0;  // at most this many CTAs (0: one wave at full occupancy)
  // CTA slots of the one wave left unlaunched (room for the next kernel's CTAs, which PDL may
  // launch before this one ends)
  int grid_free = 0;
  bool probe = false;         // bench only: weight loads alone, no conversion / mma (y is garbage;
                              // fp16 in and out only)
  bool pdl = false;           // launch with programmatic dependent launch (sm_90)
  bool late_trigger = false;  // let the next kernel (if launched with PDL) launch after the main
                              // loop, not at entry
  int trigger_pct = 100;      // with late_trigger: after this share (%) of each warp's batches
                              // (100: after the main loop; PERFX_CUDA_PDL_GEMV3=NN sets 1..99)
  bool swiglu = false;  // SwiGLU epilogue for a gate|up weight packed W4RowOrder::kInterleave8:
                        // y [M, N / 2] (activation dtype) = silu(g) · u, where g and u are the
                        // gate / up results (+ bias[c], bias[N / 2 + c]) rounded to the
                        // activation dtype (the unfused linear + silu_mul, bit for bit)
  L2Prefetch prefetch;  // read into L2 by each CTA before its PDL wait (its share of the ranges)
  bool l2_evict_first = true;  // weights and records loaded with an L2 evict-first policy, else
                               // evict-normal (docs/cuda_linear_notes.md §31)
  W4A8Act a8;           // q != null: W4A8 — int8 activations, mma.m16n8k32 u8·s8 in int32 per
               // group, then scale_w · d · (Σ q_w q_x − zero · Σ q_x) in fp32 (x, ldx
               // unused; groups 32, 64, 128)
};
/// W4A16 GEMV v3, M = 1..8 tokens, group sizes 32..512 (docs/cuda_linear_notes.md §9): the v1
/// data flow (exact q − z in the conversion, fp32 mma per group, one scale FMA per group) with the
/// per-chunk bookkeeping taken out: one wave of 8-warp CTAs walking (row block, K share) tasks,
/// a register ring of 8 weight quads per lane (6 for groups 32 / 64) whose batch addresses are
/// computed once per batch, no branches in the chunk body, activations read from global memory
/// (L1) two slots ahead (groups >= 128; §17), split-K partials summed in shared memory behind a
/// named barrier. x [M, K] (row stride ldx, fp16/bf16), y [M, N] (ldy; activation
/// dtype or F32), bias [N] fp32 or null. Numerics: as w4_gemv (error = fp32 summation, ~1e-6).
/// Throws perfx::Error for M > 8, a group size > 512, a split not in {1, 2, 4, 8}, cfg.probe with
/// other than fp16 in and out, or the argument errors of check_linear_args (dtype, ld, alignment).
void w4_gemv3(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
              int64_t ldy, const float* bias, cudaStream_t stream, const W4Gemv3Config& cfg = {});
/// Whether w4_gemv3 takes (w, M): 1 <= M <= 8 and group size <= 512.
bool w4_gemv3_supported(const W4View& w, int M);
/// The split w4_gemv3 picks when cfg.split == 0: 8, halved while a segment would hold less than
/// one batch of chunks (measured best on every Llama-2-7B / TinyLlama shape, §9).
int w4_gemv3_default_split(const W4View& w, int M);

/// Tile shapes of the W4 tensor-core GEMM (rows of W × tokens per CTA).
enum class W4GemmTile : uint8_t {
  S32,    // 64 rows × 32 tokens, 4 warps (16×32 each), 6 stages: M 9..32
  S64,    // 64 rows × 64 tokens, 4 warps (32×32 each), 5 stages: M 33..64
  L128,   // 128 rows × 128 tokens, 8 warps (32×64 each), 4 stages: M >= 65
  L128R,  // 128 rows × 128 tokens, 8 warps (64×32 each), 4 stages: candidate for M >= 65
};
const char* w4_gemm_tile_name(W4GemmTile t);
/// Split-K factor the heuristic picks for (tile, M): enough CTAs to fill the GPU's
/// multiprocessors twice, at least 8 chunks of 64 channels per split; 1 for L128 / L128R.
int w4_gemm_split_k(const W4View& w, W4GemmTile tile, int M);
/// Workspace bytes w4_gemm needs for split_k (0 when split_k == 1): split_k · M · N fp32.
size_t w4_gemm_workspace_bytes(const W4View& w, int M, int split_k);
/// W4A16 GEMM on tensor cores, any M >= 1 (efficient for M >= 9). split_k > 1 writes fp32
/// partials to `ws` ([split_k][M][N]) and a second kernel sums them in split order, adds the
/// bias and converts. Numerics: the weight is dequantized to x's type, (q − zero)·scale rounded
/// once (fp16: <= 2^-11 relative, bf16: <= 2^-8 incl. the scale's rounding to bf16), products
/// summed in fp32 by the mma, bias added in fp32, one final rounding to y's type.
void w4_gemm(const W4View& w, W4GemmTile tile, int split_k, const void* x, DType xt, int M,
             int64_t ldx, void* y, DType yt, int64_t ldy, const float* bias, void* ws,
             size_t ws_bytes, cudaStream_t stream);

/// dst [N, ldd] (F16 or BF16) = W, each element (q − zero)·scale computed in fp32 and rounded once
/// (bit-identical to rounding Int4Matrix::dequant). ldd >= K, a multiple of 8; dst 16-byte aligned.
void w4_dequantize(const W4View& w, void* dst, DType dt, int64_t ldd, cudaStream_t stream);

/// Q8_0 GEMV, M = 1..8: same structure and numerics as w4_gemv (exact q·x in fp32 per group of 32,
/// then · scale).
void w8_gemv(const W8View& w, const void* x, DType xt, int M, int64_t ldx, void* y, DType yt,
             int64_t ldy, const float* bias, cudaStream_t stream, int warps = 0, int x_smem = -1);
/// dst [N, ldd] = q · scale (fp32, rounded once to dt). Same preconditions as w4_dequantize.
void w8_dequantize(const W8View& w, void* dst, DType dt, int64_t ldd, cudaStream_t stream);

/// y[m, n] += bias[n] for m < M, n < N (y F32/F16/BF16, in place, fp32 add then one rounding).
void add_bias(void* y, DType yt, int64_t ldy, int M, int64_t N, const float* bias,
              cudaStream_t stream);

// =============================================================================== dispatch

enum class LinearKernel : uint8_t { Gemv, GemmS32, GemmS64, GemmL128, Dense, Gemv2, Gemv3 };
const char* linear_kernel_name(LinearKernel k);

/// What the ladder picked for one call.
struct LinearPlan {
  LinearKernel kernel = LinearKernel::Gemv;
  int split_k = 1;
};

/// The caller's dense GEMM for the "dequantize + cuBLAS" path (large M):
///   y [M, N] (yt, ldy) = x [M, K] (xt, ldx) · w_dense [N, K]ᵀ (xt, row-major, ld = K) + bias
/// on `stream` (bias fp32 [N] or null; add_bias() may be used for it). Must be capturable when the
/// caller captures graphs.
struct DenseGemm {
  void (*fn)(void* ctx, const void* w_dense, int64_t N, int64_t K, const void* x, DType xt, int M,
             int64_t ldx, void* y, DType yt, int64_t ldy, const float* bias,
             cudaStream_t stream) = nullptr;
  void* ctx = nullptr;
};

/// Caller-owned scratch memory (device, 256-byte aligned as cudaMalloc gives).
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

/// Smallest M that takes the Dense path when a DenseGemm is given: PERFX_CUDA_W4_DENSE_MIN_M, else
/// 65. Measured on the H200 (tools/device/batch_sweep.sh, 7B AWQ batched decode, tok/s): from
/// M = 96 to 256 dequantize + cuBLAS beats the fused L128 GEMM by 35–46 % (x96 6,413 vs 4,722,
/// x128 8,321 vs 6,167, x192 11,201 vs 7,619, x256 14,009 vs 9,625); M <= 64 keeps the S32 / S64
/// GEMMs (x64 8,047). Read once per process; a value that is not a whole number from 1 to 2^20
/// throws (std::runtime_error naming the variable).
int w4_dense_min_m();

/// The share (%) of its batches after which the decode GEMV (w4_gemv3) of the QKV projection lets
/// attention launch (linear_w4a16's trigger_pct for a weight the backend has seen followed by
/// attention): PERFX_CUDA_QKV_TRIGGER, else 67 (+1.7 % on 7B decode, docs/cuda_linear_notes.md
/// §20); 0 = after the main loop, as every other w4_gemv3. Read once per process; a value that is
/// not a whole number from 0 to 99 throws (naming the variable).
int qkv_trigger_pct();

/// CTA slots of its one-wave grid that the decode GEMV (w4_gemv3) of the QKV projection leaves
/// unlaunched, so attention's CTAs, launched early by PDL (qkv_trigger_pct), can be resident and
/// run their prologue while the projection streams: PERFX_CUDA_QKV_GRID_FREE, else 0
/// (docs/cuda_linear_notes.md §29). Read once per process; a value that is not a whole number
/// from 0 to 1024 throws (naming the variable).
int qkv_grid_free();

/// The W4 ladder ("use me?" predicates in order): M <= 8 → Gemv; M <= 32 → GemmS32; M <= 64 →
/// GemmS64; M >= w4_dense_min_m() and have_dense → Dense; else GemmL128. split_k from
/// w4_gemm_split_k. With PERFX_CUDA_W4_GEMV=v2 (or v2s: fp16 subnormal conversion; read once
/// per process), M <= 16 takes Gemv2 when w4_gemv2_fits, before the rungs above;
/// PERFX_CUDA_W4_GEMV_CFG="warps,rows_per_cta" overrides its configuration. The GEMVs are launched
/// with programmatic dependent launch unless PERFX_CUDA_PDL=0 (pdl.cuh).
LinearPlan w4a16_plan(const W4View& w, int M, bool have_dense);
/// The W8 ladder: M <= 8 → Gemv; else Dense when have_dense, else Gemv over 8-token slices
/// (correct but ceil(M/8) passes over the weight).
LinearPlan w8a16_plan(const W8View& w, int M, bool have_dense);

/// Workspace bytes that any linear_w4a16 call with M <= max_M needs (split-K partials; plus the
/// dense [N, K] 2-byte copy when have_dense). Use the max over a model's weights.
size_t linear_workspace_bytes(const W4View& w, int max_M, bool have_dense);
size_t linear_workspace_bytes(const W8View& w, int max_M, bool have_dense);

/// y = x · Wᵀ (+ bias) with the kernel w4a16_plan picks; returns the plan. Dense path:
/// w4_dequantize into ws, then dense->fn. PERFX_CUDA_LINEAR_LOG=1 prints the choice to stderr once
/// per (N, K, group, M, dtypes). Throws perfx::Error on a precondition failure or a too small
/// workspace.
/// `prefetch`: read into L2 by w4_gemv3 or w4_gemv when the plan picks one (the other kernels
/// ignore it).
/// `trigger_pct` (1..99): that w4_gemv3 lets the next kernel launch after this share of each
/// warp's batches instead of after its main loop (PERFX_CUDA_PDL_GEMV3's rule for one call: the
/// QKV projection with PERFX_CUDA_QKV_TRIGGER) when PERFX_CUDA_PDL_GEMV3 keeps its default rule;
/// 0 keeps the configured rule.
LinearPlan linear_w4a16(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* y,
                        DType yt, int64_t ldy, const float* bias, Workspace ws, cudaStream_t stream,
                        const DenseGemm* dense = nullptr, const L2Prefetch& prefetch = {},
                        int trigger_pct = 0);
/// The SwiGLU MLP's first half on a gate|up weight packed W4RowOrder::kInterleave8, when
/// w4a16_plan picks w4_gemv3 for (w, M): act [M, N / 2] (activation dtype, row stride ldact) =
/// silu(g) · u with w4_gemv3's SwiGLU epilogue; bias [N] in the parts' order (gate, then up) or
/// null. Returns false and launches nothing for any other plan or with
/// PERFX_CUDA_SWIGLU_EPILOGUE=0 (the caller then runs
/// linear_w4a16 into a [M, N] buffer, whose columns are in the interleaved order, and
/// launch_silu_mul_interleaved). Throws perfx::Error as linear_w4a16.
bool linear_w4a16_swiglu(const W4View& w, const void* x, DType xt, int M, int64_t ldx, void* act,
                         int64_t ldact, const float* bias, cudaStream_t stream,
                         const L2Prefetch& prefetch = {}, Workspace ws = {});
/// Whether linear_w4a16_norm_pair takes the pair (w1, w2) at M tokens: 1 <= M <= 8, w4a16_plan
/// picks w4_gemv (v1) for both, w1's N is w2's K, and that K and w2's CTA meet GemvNormLink's
/// consumer needs (K % 8 == 0, K <= 4096, enough threads). Reads the plan rules (w4a16_plan,
/// which may query the current device's properties for wide matrices); launches nothing.
bool w4a16_norm_pair_applies(const W4View& w1, const W4View& w2, int M);
/// The decode pair linear → add + RMSNorm → linear as two w4_gemv launches linked by GemvNormLink
/// (docs/cuda_linear_notes.md §30), one kernel fewer than linear, add_rms_norm, linear:
/// residual [M, N1] = round(residual + round(x·W1ᵀ + b1)), then y2 [M, N2] = round(γ ⊙ residual ·
/// rsqrt(mean(residual²) + eps)) · W2ᵀ + b2, rounded to xt — the same bits as the unfused ops
/// (the vectorized norm kernel's order). x [M, K1], residual and y2 in xt (F16 / BF16), row
/// strides ldx, ldr, ldy2; residual 16-byte aligned with ldr % 8 == 0; gamma fp32 [N1], 16-byte
/// aligned; b1 / b2 fp32 or null. pf1 / pf2: each GEMV's L2 prefetch (linear_w4a16's `prefetch`).
/// Errors: perfx::Error when w4a16_norm_pair_applies is false or a w4_gemv precondition fails;
/// the consumer's are checked before the producer launches, so a refused call leaves the residual
/// as it was.
void linear_w4a16_norm_pair(const W4View& w1, const void* x, int64_t ldx, const float* b1,
                            void* residual, int64_t ldr, const float* gamma, float eps,
                            const W4View& w2, void* y2, int64_t ldy2, const float* b2, DType xt,
                            int M, cudaStream_t stream, const L2Prefetch& pf1 = {},
                            const L2Prefetch& pf2 = {});
/// Bytes quantize_act_q8 needs in its workspace for M rows of K at `group`.
size_t act_q8_bytes(int M, int64_t K, int group);
/// Quantizes x [M, K] (fp16/bf16, row stride ldx) per group of `group` channels into ws (W4A8Act
/// layout), on `stream` (PDL); launch_kernel = false only lays the buffers out (timing without the
/// quantizer). Throws perfx::Error unless group is 32, 64 or 128, K a multiple of 128, x 8-byte
/// aligned with ldx a multiple of 4, and ws at least act_q8_bytes.
W4A8Act quantize_act_q8(const void* x, DType xt, int M, int64_t ldx, int64_t K, int group,
                        Workspace ws, cudaStream_t stream, bool launch_kernel = true);
/// Whether the W4 decode GEMV takes int8 activations for (w, M): PERFX_CUDA_W4A8=1 (off by
/// default; docs/cuda_linear_notes.md §13), w4_gemv3_supported, group 32 / 64 / 128 and K a
/// multiple of 128. Read once per process.
bool w4a8_should_use(const W4View& w, int M);
/// Same for Q8_0 weights (w8a16_plan).
LinearPlan linear_w8a16(const W8View& w, const void* x, DType xt, int M, int64_t ldx, void* y,
                        DType yt, int64_t ldy, const float* bias, Workspace ws, cudaStream_t stream,
                        const DenseGemm* dense = nullptr);

inline size_t linear_workspace_bytes(const W4Weight& w, int max_M, bool have_dense) {
  return linear_workspace_bytes(w.view(), max_M, have_dense);
}
inline size_t linear_workspace_bytes(const W8Weight& w, int max_M, bool have_dense) {
  return linear_workspace_bytes(w.view(), max_M, have_dense);
}
inline LinearPlan linear_w4a16(const W4Weight& w, const void* x, DType xt, int M, int64_t ldx,
                               void* y, DType yt, int64_t ldy, const float* bias, Workspace ws,
                               cudaStream_t stream, const DenseGemm* dense = nullptr,
                               const L2Prefetch& prefetch = {}, int trigger_pct = 0) {
  return linear_w4a16(w.view(), x, xt, M, ldx, y, yt, ldy, bias, ws, stream, dense, prefetch,
                      trigger_pct);
}
inline LinearPlan linear_w8a16(const W8Weight& w, const void* x, DType xt, int M, int64_t ldx,
                               void* y, DType yt, int64_t ldy, const float* bias, Workspace ws,
                               cudaStream_t stream, const DenseGemm* dense = nullptr) {
  return linear_w8a16(w.view(), x, xt, M, ldx, y, yt, ldy, bias, ws, stream, dense);
}

/// Sets the kernels' dynamic shared-memory limits (GEMM tiles, GEMV staged activations) on the
/// current device. Call once at backend creation, outside graph capture (the launchers also do it
/// on first use). Single-device: the once-per-process flags do not track devices.
void linear_kernels_init();
/// One line per kernel instance: registers, static/dynamic shared memory, threads and resident
/// CTAs per multiprocessor on the current device (cudaFuncGetAttributes + the occupancy API).
std::string linear_kernels_describe();

}  // namespace perfx::cuda
