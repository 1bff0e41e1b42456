#include "core/dtype.h"

#include "perfx/status.h"

namespace perfx {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

int dtype_block_elems(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1: return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return 256;
    default: return 1;
  }
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::I8: case DType::U8: return 1;
    case DType::F64: case DType::I64: return 8;
    case DType::Q8_0: return 34;
    case DType::Q4_0: return 18;
    case DType::Q4_1: return 20;
    case DType::Q4_K: return 144;
    case DType::Q5_K: return 176;
    case DType::Q6_K: return 210;
  }
  return 0;
}

size_t dtype_row_bytes(DType t, int64_t n) {
  const int be = dtype_block_elems(t);
  PERFX_CHECK(n >= 0 && n % be == 0, std::string("row of ") + std::to_string(n) + " elements is not a multiple of the " +
                                   dtype_name(t) + " block size " + std::to_string(be));
  return (size_t)(n / be) * dtype_block_bytes(t);
}

bool is_weight_dtype(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void float_to_f32(DType t, const void* src, float* dst, int64_t n, const std::string& what) {
  const auto* s = static_cast<const uint8_t*>(src);
  uint16_t h;
  switch (t) {
    case DType::F32:
      std::memcpy(dst, s, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32((std::memcpy(&h, s + 2 * i, 2), h));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32((std::memcpy(&h, s + 2 * i, 2), h));
      return;
    default:
      throw Error(what + " has dtype " + dtype_name(t) + ", expected a float type (F32, F16, BF16)");
  }
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) {  // inf or nan
    return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
  }
  if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00);  // rounds to >= 65520 -> inf
  if (absx < 0x38800000) {                                   // subnormal or zero in fp16
    // value = absx as float; fp16 subnormal unit is 2^-24
    float af;
    std::memcpy(&af, &absx, 4);
    const float scaled = af * 16777216.0f;  // / 2^-24
    // round half to even
    uint32_t r = (uint32_t)scaled;
    const float frac = scaled - (float)r;
    if (frac > 0.5f || (frac == 0.5f && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t exp = ((absx >> 23) - 127 + 15);
  uint32_t mant = absx & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;  // may carry into exponent: correct
  return (uint16_t)(sign | h);
}

}  // namespace perfx
