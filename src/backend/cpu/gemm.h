// Blocked fp32 GEMM behind the CPU backend's linear for several tokens (prefill, batched decode):
//   y[t, r] = Σ_k x[t, k] · W[r, k]
// Activations are [T, in] and weights [out, in] as stored, so nothing is repacked at load. W is
// materialised in fp32 one panel at a time (kGemmRows rows × up to kGemmKBlock columns) by a
// PanelSource that knows the stored format (bf16/f16/f32/GGUF blocks, AWQ int4); the driver
// transposes the panel to k-major order (16 KiB, stays in L1) and sweeps every token of a block of
// kGemmTBlock tokens over it with a 6-token × 16-row register tile: per column k, two panel
// vectors and six broadcast activations feed 12 FMAs, and each accumulator is one (token, row)
// output, so no horizontal sums are needed (the usual SGEMM micro-kernel shape, e.g. Goto & van
// de Geijn, "Anatomy of High-Performance Matrix Multiplication", ACM TOMS 34(3), 2008).
#pragma once

#include <cstdint>

namespace perfx::cpu {

constexpr int kGemmRows = 16;     // weight rows per panel (two 8-lane vectors)
constexpr int kGemmKBlock = 256;  // columns per panel (16 × 256 × 4 B = 16 KiB)
constexpr int kGemmTBlock = 96;   // tokens per block (96 × 256 × 4 B of x stay in L2)

/// Produces fp32 panels of a weight matrix [out, in].
class PanelSource {
 public:
  virtual ~PanelSource() = default;
  /// Writes W[r + i, k0 + j] for i < nr (nr <= kGemmRows), j < kn (kn <= kGemmKBlock) into
  /// buf[i * kGemmKBlock + j]. k0 is a multiple of kGemmKBlock. Rows i >= nr are not read.
  virtual void fill(int64_t r, int nr, int64_t k0, int64_t kn, float* buf) const = 0;
  /// Hint: the same panel will be filled soon (issue cache prefetches for its stored bytes, so a
  /// weight matrix larger than the caches streams from DRAM while the previous panel computes).
  virtual void prefetch(int64_t r, int nr, int64_t k0, int64_t kn) const {
    (void)r, (void)nr, (void)k0, (void)kn;
  }
};

/// For output rows r in [r0, r1) and tokens t < T: y[t * ldy + r] = Σ_{k < in} x[t * ldx + k] ·
/// W[r, k], with W's rows from `w` (fp32 panels). x: fp32 [T, ldx]; y: fp32, indexed by the
/// absolute row r. Summation is in fp32 in k order within each kGemmKBlock block, blocks added in
/// order (so results differ from a plain dot by rounding only). T <= 0 or r0 >= r1: nothing is
/// written.
void gemm_nt(const float* x, int T, int64_t ldx, int64_t in, const PanelSource& w, int64_t r0,
             int64_t r1, float* y, int64_t ldy);

}  // namespace perfx::cpu
