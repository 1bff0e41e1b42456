// Element types of stored tensors and fp16/bf16 <-> fp32 conversion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace perfx {

/// Storage types. Block-quantized types (GGUF Q8_0/Q4_0/Q4_1) hold 32 elements per block along the
/// innermost dimension (FORMATS.md §4.4); GGUF's k-quants Q4_K/Q5_K/Q6_K super-blocks of 256
/// (layouts in backend/cpu/reference.cpp dequantize_row).
enum class DType : uint8_t {
  F32, F16, BF16, I32, I16, I8, U8, F64, I64, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K
};

const char* dtype_name(DType t);

/// Elements per block (1 for plain types, 32 for Q8_0/Q4_0/Q4_1).
int dtype_block_elems(DType t);
/// Bytes per block (element size for plain types).
size_t dtype_block_bytes(DType t);
/// Bytes taken by n elements along a row; n must be a multiple of the block size (else perfx::Error).
size_t dtype_row_bytes(DType t, int64_t n);
/// True for the dtypes a weight matrix may be stored in: F32, F16, BF16 and GGUF's
/// Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K (the ones the CPU reference dequantize_row converts).
bool is_weight_dtype(DType t);
/// Converts n F32/F16/BF16 elements at src (any alignment) to fp32 (exact). Other dtypes:
/// perfx::Error naming `what` and the dtype.
void float_to_f32(DType t, const void* src, float* dst, int64_t n, const std::string& what = "tensor");

/// IEEE 754 binary16 -> binary32 (exact).
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        exp--;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// binary32 -> binary16, round to nearest even (as torch's .half()).
uint16_t fp32_to_fp16(float f);

/// bfloat16 -> binary32 (exact).
inline float bf16_to_fp32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// binary32 -> bfloat16, round to nearest even (NaN kept quiet).
inline uint16_t fp32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return (uint16_t)((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}

}  // namespace perfx
