// Linear layers over quantized weights with int8 activations (the CPU backend's default for int4
// and Q8_0 weights; PERFX_ACT_QUANT=off selects the exact fp32-activation kernels instead).
//
// Weights: the canonical forms of core/quantized.h (AWQ and GGUF Q4_0 / Q4_1 as Int4Matrix, GGUF
// Q8_0 as Int8Matrix) are repacked once at load into QMatrix, the layout the kernels stream:
// tiles of 16 output rows, and inside a tile, chunks of 64 bytes that hold 16 rows × 8 columns of
// 4-bit values (byte 4i + j of chunk c: low nibble = q[row i][8c + j], high nibble =
// q[row i][8c + 4 + j]) or 16 rows × 4 columns of 8-bit values (byte 4i + j = q[row i][4c + j]).
// One 32-bit lane of a 64-byte chunk is one row's 4 consecutive columns, which is what x86
// vpdpbusd / vpmaddubsw+vpmaddwd and ARM sdot / udot multiply-add against 4 broadcast activation
// bytes: every lane accumulates one output row, so no horizontal sums are needed. After the
// chunks of a tile come its per-group metadata: fp16 scales [G][16], then u8 zeros [G][16]
// (AWQ) or fp16 mins [G][16] (Q4_1) or nothing (Q4_0: zero 8; Q8_0: stored as q + 128, zero 128).
//
// Activations: quantized per token and per block of 32 to int8, symmetric (QActivations):
// d = max|x| / 127, q = round-half-even(x · (127 / max|x|)) clamped to ±127 (q = 0 when the block
// is all zeros). The kernels then compute, for a weight row r of group size g and a token:
//   zeros (AWQ):     y = Σ_g s·(Σ_{b∈g} d_b·dot_b − z·Σ_{b∈g} d_b·Σq_b)
//   constant zero:   y = Σ_g s·Σ_{b∈g} d_b·(dot_b − z·Σq_b)          (Q4_0 z = 8, Q8_0 z = 128)
//   mins (Q4_1):     y = Σ_g (s·Σ_{b∈g} d_b·dot_b + m·Σ_{k∈g} x_k)
// with dot_b = Σ_{k∈b} q_w[r, k]·q_x[k] exact in int32 (q_w the stored unsigned value). The integer
// parts are exact, so every kernel (x86 AVX2, AVX-VNNI, AVX-512 VNNI, ARM NEON) equals the plain
// reference qlinear_ref up to fp32 summation order. Versus exact fp32 activations the error per
// output is at most Σ_k |W[r, k]|·d_b(k)/2 (half a quantization step of every activation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/quantized.h"

namespace perfx::cpu {

constexpr int kQTileRows = 16;  // output rows per tile (one 512-bit register of int32 lanes)
constexpr int kQBlock = 32;     // activation quantization block

/// How a group's zero point is given.
enum class QOffset : uint8_t {
  Zeros,  // u8 zero per (row, group): W = (q − z)·s (AWQ)
  Mins,   // fp16 min per (row, group): W = q·s + m (GGUF Q4_1)
  Const,  // one zero for the whole matrix: W = (q − z)·s (Q4_0: 8; Q8_0 stored + 128: 128)
};

/// A weight matrix [out, in] repacked for the int8-activation kernels (layout above).
/// Invariants: in % group == 0, group % 32 == 0, bits 4 or 8; rows past `out` in the last tile are
/// zero (scale 0), so they produce 0 and are never stored.
struct QMatrix {
  int64_t out = 0, in = 0;
  int bits = 4;
  int group = 32;
  QOffset offset = QOffset::Const;
  int const_zero = 0;
  int64_t tiles = 0;             // ceil(out / 16)
  size_t data_bytes = 0;         // per tile: 16 · in · bits / 8 bytes of values
  size_t tile_bytes = 0;         // per tile: values + metadata, rounded up to 64
  std::shared_ptr<uint8_t> buf;  // tiles · tile_bytes, 64-byte aligned

  int64_t groups() const { return in / group; }
  const uint8_t* tile(int64_t t) const { return buf.get() + (size_t)t * tile_bytes; }
  /// fp16 scales of tile t: [G][16].
  const uint16_t* scales(int64_t t) const {
    return reinterpret_cast<const uint16_t*>(tile(t) + data_bytes);
  }
  /// u8 zeros (Zeros) of tile t: [G][16].
  const uint8_t* zeros(int64_t t) const {
    return reinterpret_cast<const uint8_t*>(scales(t) + groups() * kQTileRows);
  }
  /// fp16 mins (Mins) of tile t: [G][16].
  const uint16_t* mins(int64_t t) const { return scales(t) + groups() * kQTileRows; }
  /// The stored unsigned value of W[r, k] (0..15, or 0..255 for 8 bits).
  int value(int64_t r, int64_t k) const;
  /// W[r, k] in fp32 by the formula of `offset` (what the exact path computes).
  float dequant(int64_t r, int64_t k) const;
  size_t bytes() const { return (size_t)tiles * tile_bytes; }
};

/// True when `m` can be repacked (group_size % 32 == 0, in % group_size == 0).
bool qmatrix_supports(const Int4Matrix& m);
/// Repacks int4 matrices stacked by rows (fused QKV, gate|up) into one QMatrix. All parts share
/// `in`, group_size and the kind of offset (zeros or mins); Q4_0-style parts (every zero 8) are
/// stored with a constant zero. Throws perfx::Error when the parts do not fit those rules.
QMatrix qmatrix_from_int4(const std::vector<const Int4Matrix*>& parts);
/// Repacks int8 matrices (GGUF Q8_0, group 32) stacked by rows; values stored as q + 128.
QMatrix qmatrix_from_int8(const std::vector<const Int8Matrix*>& parts);

/// Activations of T tokens quantized per block of 32 (rule above).
struct QActivations {
  int T = 0;
  int64_t in = 0;
  std::vector<int8_t> q;      // [T, in]
  std::vector<float> d;       // [T, in / 32] scale per block
  std::vector<int32_t> qsum;  // [T, in / 32] Σ q over the block
  std::vector<float> xsum;    // [T, in / 32] Σ x over the block (fp32, in k order)
  int64_t blocks() const { return in / kQBlock; }
  /// Sizes the arrays for T tokens of `in` (in % 32 == 0).
  void resize(int T, int64_t in);
};

/// Quantizes tokens [t0, t1) of x [T, ldx] (fp32) into `a` (already resize()d). Plain reference.
void quantize_act_ref(const float* x, int64_t ldx, int t0, int t1, QActivations& a);
/// Same, vectorised (results bit-identical to the reference).
void quantize_act(const float* x, int64_t ldx, int t0, int t1, QActivations& a);

/// For the tiles [tile0, tile1) of w and every token t < a.T:
/// y[t * ldy + r] = Σ_k W[r, k] · x[t, k] by the formulas above, for the rows r < w.out of those
/// tiles (y indexed by the absolute row). Plain reference: per row, blocks and groups in k order.
void qlinear_ref(const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1, float* y,
                 int64_t ldy);

/// Instruction sets the kernels come in.
enum class QIsa { Ref, Avx2, AvxVnni, Avx512Vnni, Neon };
const char* qisa_name(QIsa isa);
/// True when this CPU runs `isa` (Ref: always).
bool qisa_available(QIsa isa);
/// The fastest available ISA (PERFX_QLINEAR_ISA=ref|avx2|avxvnni|avx512vnni|neon lowers it).
QIsa qisa_best();
/// Same contract as qlinear_ref with the kernels of `isa` (must be available).
void qlinear_isa(QIsa isa, const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1,
                 float* y, int64_t ldy);
/// qlinear_isa(qisa_best(), ...).
void qlinear(const QActivations& a, const QMatrix& w, int64_t tile0, int64_t tile1, float* y,
             int64_t ldy);

/// Zero-filled, 64-byte-aligned memory for weights repacked at load, backed by transparent huge
/// pages where the kernel allows (streaming gigabytes through 4 KiB pages costs a TLB miss per
/// page). Freed when the last copy of the pointer goes. Throws perfx::Error when out of memory.
std::shared_ptr<uint8_t> alloc_weight_memory(size_t bytes);

/// True unless the environment sets PERFX_ACT_QUANT=off (or 0): whether the CPU backend quantizes
/// activations to int8 for int4 / Q8_0 weights. Read when a backend is created.
bool act_quant_enabled();

}  // namespace perfx::cpu
