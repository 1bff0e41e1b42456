// Group-wise asymmetric integer quantization (AWQ's quantizer, FORMATS.md §1.8) and the writers of
// the AutoAWQ int4 packings (GEMM: FORMATS.md §2.3, GEMV: §2.4); reading them back is
// formats/awq.h's decode_awq, the one decoder.
//
// Orientation: every matrix here is an HF nn.Linear weight W [out, in]; a group is `group_size`
// consecutive *input* channels of one output row.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/quantized.h"
#include "formats/awq.h"

namespace perfx::quant {

/// torch.round: rounds half to even. Exact for every float (|x| ≥ 2^23 is already an integer);
/// relies on the default round-to-nearest-even mode and vectorizes without SSE4.1.
inline float round_half_even(float x) {
  const float a = std::fabs(x);
  if (!(a < 8388608.0f)) return x;  // integers, inf, nan
  const float r = (a + 8388608.0f) - 8388608.0f;
  return std::copysign(r, x);
}

/// A matrix quantized group-wise: W[n][k] ≈ (q[n][k] − zeros[n][k/g]) · scales[n][k/g].
struct QuantizedMatrix {
  int64_t out = 0, in = 0;
  int group_size = 128;
  int bits = 4;
  std::vector<uint8_t> q;        // [out, in], values in [0, 2^bits − 1]
  std::vector<uint8_t> zeros;    // [out, in / group_size], values in [0, 2^bits − 1]
  std::vector<uint16_t> scales;  // [out, in / group_size], IEEE fp16 bits
  int64_t groups() const { return in / group_size; }
};

/// Fake quantization ("pseudo_quantize_tensor", FORMATS.md §1.8) in fp32 arithmetic, in place:
/// every group of `group_size` values of each row of w [out, in] is replaced by (q − z)·scale.
/// Used by the AWQ scale and clip searches. Throws perfx::Error when in % group_size != 0,
/// bits not in [2, 8], or a value is NaN.
void fake_quantize(float* w, int64_t out, int64_t in, int group_size, int bits);

/// Same as fake_quantize for one group of n values (no checks).
void fake_quantize_group(float* w, int n, int bits);

/// The final quantization exactly as AutoAWQ performs it after `.half()` (FORMATS.md §1.8): w is
/// rounded to fp16, and max/min, scale, zero, q, the fake-quantized value w' and the stored integer
/// round((w' + z·s) / s) are all computed with fp16 rounding after every operation (fp32 holds
/// every fp16 product exactly and rounding fp32 quotients to fp16 is innocuous, 24 ≥ 2·11 + 2),
/// with torch.round's half-to-even. AutoAWQ ORs the stored integer into the packed word unclamped;
/// we clamp it to [0, 2^bits − 1] instead (values outside only arise when the fp16 scale is
/// subnormal) and count the clamps in `*n_clamped` when given.
/// Throws perfx::Error for in % group_size != 0, bits not in [2, 8], or a NaN weight.
QuantizedMatrix quantize_fp16(const float* w, int64_t out, int64_t in, int group_size, int bits,
                              int64_t* n_clamped = nullptr);

/// w [out, in] = (q − z) · scale, in fp32 (scales converted exactly from fp16).
void dequantize(const QuantizedMatrix& m, float* w);

// ---------------------------------------------------------------------------------------------
// AutoAWQ packings (4-bit only; 8 nibbles per int32).

/// Packs 8 values (each 0..15) of consecutive output columns 8c..8c+7 into one GEMM word.
uint32_t pack_gemm_word(const uint8_t v[8]);
/// The GEMM-format tensors of one linear (FORMATS.md §2.2/§2.3), I = in, O = out, G = I/g.
struct GemmTensors {
  std::vector<int32_t> qweight;  // [I, O/8]
  std::vector<int32_t> qzeros;   // [G, O/8]
  std::vector<uint16_t> scales;  // [G, O] fp16
};
/// Requires bits == 4 and out % 8 == 0 (else perfx::Error).
GemmTensors pack_gemm(const QuantizedMatrix& m);
/// The GEMV-format tensors of one linear (FORMATS.md §2.4), ZW = awq_gemv_zeros_width (formats/awq.h).
struct GemvTensors {
  std::vector<int32_t> qweight;  // [O, I/8], nibble i of word c = input column 8c + i
  std::vector<int32_t> qzeros;   // [O, ZW], nibble i of word j = zero of group 8j + i, padding 0
  std::vector<uint16_t> scales;  // [O, ZW·8] fp16, padding 0
};
/// Requires bits == 4 and in % 8 == 0 (else perfx::Error).
GemvTensors pack_gemv(const QuantizedMatrix& m);
/// The canonical matrix (formats/awq.h decode_awq's result) unpacked to one byte per value.
/// Throws perfx::Error when it uses mins (GGUF Q4_1).
QuantizedMatrix from_int4(const Int4Matrix& m);

}  // namespace perfx::quant
