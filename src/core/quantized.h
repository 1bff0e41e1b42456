// Canonical forms of group-quantized weight matrices. The loader decodes every on-disk packing
// (AutoAWQ GEMM / GEMV, GGUF Q4_0 / Q4_1 / Q8_0) into one of these once; each backend then packs
// the canonical form into its own kernels' layout at load (no backend knows a checkpoint format).
//
// Orientation: a matrix is an HF nn.Linear weight W [out, in]; a group is `group_size` consecutive
// input channels of one output row (AWQ, FORMATS.md §1.8; GGUF blocks, FORMATS.md §4.4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace perfx {

/// Group-wise asymmetric int4 matrix, values in natural order.
///   W[r, k] = (q[r, k] − zeros[r, g]) · scales[r, g]   (AWQ, GGUF Q4_0 with zero 8), or, when
///   `mins` is not empty, W[r, k] = q[r, k] · scales[r, g] + mins[r, g]   (GGUF Q4_1),
/// with g = k / group_size, all products in fp32 from the fp16 scale (and min).
struct Int4Matrix {
  int64_t out = 0, in = 0;
  int group_size = 128;          // a multiple of 8 dividing `in`
  std::vector<uint32_t> q;       // [out, in / 8]: nibble i (bits 4i..4i+3) of word c = q[r, 8c + i]
  std::vector<uint16_t> scales;  // [out, in / group_size] IEEE fp16 bits
  std::vector<uint8_t> zeros;    // [out, in / group_size] in [0, 15] (empty when mins is used)
  std::vector<uint16_t> mins;    // empty, or [out, in / group_size] IEEE fp16 bits (Q4_1)

  int64_t groups() const { return in / group_size; }
  bool has_mins() const { return !mins.empty(); }
  /// q[r, k] in [0, 15].
  uint32_t value(int64_t r, int64_t k) const {
    return (q[(size_t)(r * (in / 8) + k / 8)] >> (4 * (k % 8))) & 0xFu;
  }
  /// W[r, k] in fp32 by the formula above.
  float dequant(int64_t r, int64_t k) const {
    const size_t gi = (size_t)(r * groups() + k / group_size);
    const float s = fp16_to_fp32(scales[gi]);
    if (has_mins()) return (float)value(r, k) * s + fp16_to_fp32(mins[gi]);
    return ((float)value(r, k) - (float)zeros[gi]) * s;
  }
  size_t bytes() const { return q.size() * 4 + scales.size() * 2 + zeros.size() + mins.size() * 2; }
};

/// Group-wise symmetric int8 matrix (GGUF Q8_0): W[r, k] = q[r, k] · scales[r, k / group_size].
struct Int8Matrix {
  int64_t out = 0, in = 0;
  int group_size = 32;
  std::vector<int8_t> q;         // [out, in]
  std::vector<uint16_t> scales;  // [out, in / group_size] IEEE fp16 bits

  int64_t groups() const { return in / group_size; }
  float dequant(int64_t r, int64_t k) const {
    return (float)q[(size_t)(r * in + k)] *
           fp16_to_fp32(scales[(size_t)(r * groups() + k / group_size)]);
  }
  size_t bytes() const { return q.size() + scales.size() * 2; }
};

/// Decodes a GGUF Q4_0 matrix view [out, in] (blocks of 32: fp16 d, 16 bytes of nibbles; element j
/// of a block is the low nibble of byte j for j < 16, the high nibble of byte j − 16 otherwise;
/// W = (q − 8) · d; FORMATS.md §4.4) into the canonical form: group 32, zeros 8.
/// Q4_1 (fp16 d, fp16 m, 16 bytes; W = q · d + m) gives group 32 with `mins`.
/// Q4_K (super-blocks of 256: 8 sub-blocks of 32, W = d·sc_i·q − dmin·m_i) gives group 32 with
/// `mins`: scale fp16(d·sc_i), min fp16(−dmin·m_i), each product rounded once to fp16 (relative
/// 2^-11; the 4-bit step itself is 1/15 of the range).
/// Throws perfx::Error for another dtype, a non-2-D shape or a truncated tensor, naming it.
Int4Matrix int4_from_gguf(const TensorView& t);
/// True for the GGUF dtypes int4_from_gguf decodes (Q4_0, Q4_1, Q4_K).
bool int4_gguf_dtype(DType t);

/// The 8 sub-block scales d·sc_i and mins dmin·m_i (fp32) of a GGUF Q4_K / Q5_K super-block (its
/// first 16 bytes: fp16 d, fp16 dmin, then 12 bytes: bytes 0-3 hold the low 6 bits of scales 0-3,
/// bytes 4-7 those of mins 0-3, bytes 8-11 the low 4 bits of scale / min 4+i in their low / high
/// nibble, whose top 2 bits are the top bits of bytes i (scale) and 4 + i (min)).
void kquant_scales_mins(const void* block, float* scales, float* mins);

/// Decodes a GGUF Q8_0 matrix view [out, in] (blocks of 32: fp16 d, 32 int8; W = q · d).
/// Throws perfx::Error for another dtype, a non-2-D shape or a truncated tensor, naming it.
Int8Matrix int8_from_gguf(const TensorView& t);

/// Quantizes 32 fp32 weights to one Q8_0 block by ggml's reference rule (quantize_row_q8_0_ref,
/// the bytes llama-quantize writes; FORMATS.md §4.4): d = max|x| / 127 in fp32, q[i] = round(x[i] /
/// d) half away from zero (0 where d is 0), stored d = fp16(d). Writes q[0..31] and returns d's fp16
/// bits. The decoded weight q · fp16(d) is within d / 2 of x[i] plus |q| times fp16(d)'s rounding
/// (relative 2^-11).
uint16_t quantize_q8_0_block(const float* x, int8_t* q);

/// Quantizes 32 fp32 weights to one Q4_0 block by ggml's reference rule (quantize_row_q4_0_ref,
/// the bytes llama-quantize writes; FORMATS.md §4.4): m = the weight of largest magnitude (its sign
/// kept; the first of equals), d = m / −8 in fp32, q[i] = min(15, trunc(x[i] / d + 8.5)) (0 .. 15;
/// 8 where d is 0), element i < 16 in the low nibble of qs[i], element 16 + i in its high nibble,
/// stored d = fp16(d). Writes qs[0..15] and returns d's fp16 bits. The decoded weight (q − 8) ·
/// fp16(d) is within |d| / 2 of x[i] plus |q − 8| ≤ 8 times fp16(d)'s rounding (relative 2^-11),
/// except on the far side of m, where q clamps at 15 (within |d|: x / d in [6.5, 8]).
uint16_t quantize_q4_0_block(const float* x, uint8_t* qs);

/// Quantizes a float weight matrix view [out, in] (F32, F16 or BF16; in a multiple of 32) to GGUF
/// block bytes of `to`: Q8_0 (per row in / 32 blocks of 34 bytes: fp16 d, 32 int8; 1.0625 bytes a
/// weight instead of fp16's 2) or Q4_0 (blocks of 18 bytes: fp16 d, 16 bytes of nibbles; 0.5625),
/// each block by quantize_q8_0_block / quantize_q4_0_block. Throws perfx::Error for another target
/// type, a source dtype other than F32 / F16 / BF16, a non-2-D shape, a column count that is not a
/// multiple of 32 or a truncated tensor, naming the tensor.
std::vector<uint8_t> gguf_blocks_from_float(const TensorView& t, DType to);

}  // namespace perfx
