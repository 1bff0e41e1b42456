#include "formats/awq.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/dtype.h"
#include "core/mmap.h"
#include "perfx/status.h"

namespace perfx {
namespace {

/// Reads element i of a possibly unaligned little-endian tensor.
inline uint32_t load_u32(const TensorView& t, int64_t i) {
  uint32_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.data) + i * 4, 4);
  return v;
}
inline uint16_t load_u16(const TensorView& t, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.data) + i * 2, 2);
  return v;
}

void expect_tensor(const TensorView& t, const char* role, DType dt, int64_t d0, int64_t d1) {
  check(t.data != nullptr, std::string("AWQ linear: missing ") + role + " tensor '" + t.name + "'");
  check(t.dtype == dt, "AWQ tensor '" + t.name + "' (" + role + ") has dtype " +
                           dtype_name(t.dtype) + ", expected " + dtype_name(dt));
  check(t.shape.size() == 2 && t.shape[0] == d0 && t.shape[1] == d1,
        "AWQ tensor '" + t.name + "' (" + role + ") has shape " + t.shape_str() + ", expected [" +
            std::to_string(d0) + ", " + std::to_string(d1) + "]");
  check(t.nbytes >= static_cast<size_t>(d0 * d1) * dtype_block_bytes(dt),
        "AWQ tensor '" + t.name + "' is truncated");
}

/// Scales as fp16 bits: F16 as is, BF16 converted (exact when in the fp16 normal range).
void expect_scales(const TensorView& t, int64_t d0, int64_t d1) {
  check(t.dtype == DType::F16 || t.dtype == DType::BF16,
        "AWQ tensor '" + t.name + "' (scales) has dtype " + dtype_name(t.dtype) + ", expected F16");
  expect_tensor(t, "scales", t.dtype, d0, d1);
}
inline uint16_t scale_bits(const TensorView& t, int64_t i) {
  const uint16_t v = load_u16(t, i);
  return t.dtype == DType::F16 ? v : fp32_to_fp16(bf16_to_fp32(v));
}

void decode_gemm(const AwqTensors& src, Int4Matrix& m) {
  const int64_t I = m.in, O = m.out, G = I / m.group_size, C = O / 8, W = I / 8;
  check(O % 8 == 0, "AWQ gemm linear '" + src.qweight.name + "': out_features " +
                        std::to_string(O) + " is not a multiple of 8");
  expect_tensor(src.qweight, "qweight", DType::I32, I, C);
  expect_tensor(src.qzeros, "qzeros", DType::I32, G, C);
  expect_scales(src.scales, G, O);
  // 8 input rows × 8 output columns of nibbles form one 8×8 transpose: source words
  // qweight[k0 + j][c] (nibble kAwqReverseOrder[r] = column 8c + r) become canonical words
  // q[8c + r][k0 / 8] (nibble j = input k0 + j).
  for (int64_t kw = 0; kw < W; ++kw) {
    for (int64_t c = 0; c < C; ++c) {
      uint32_t s[8];
      for (int j = 0; j < 8; ++j) s[j] = load_u32(src.qweight, (kw * 8 + j) * C + c);
      for (int r = 0; r < 8; ++r) {
        uint32_t word = 0;
        const int sh = 4 * kAwqReverseOrder[r];
        for (int j = 0; j < 8; ++j) word |= ((s[j] >> sh) & 0xFu) << (4 * j);
        m.q[static_cast<size_t>((8 * c + r) * W + kw)] = word;
      }
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t c = 0; c < C; ++c) {
      const uint32_t z = load_u32(src.qzeros, g * C + c);
      for (int r = 0; r < 8; ++r)
        m.zeros[static_cast<size_t>((8 * c + r) * G + g)] =
            static_cast<uint8_t>((z >> (4 * kAwqReverseOrder[r])) & 0xFu);
    }
    for (int64_t n = 0; n < O; ++n)
      m.scales[static_cast<size_t>(n * G + g)] = scale_bits(src.scales, g * O + n);
  }
}

void decode_gemv(const AwqTensors& src, Int4Matrix& m) {
  const int64_t I = m.in, O = m.out, G = I / m.group_size, W = I / 8;
  const int64_t ZW = awq_gemv_zeros_width(I, m.group_size);
  expect_tensor(src.qweight, "qweight", DType::I32, O, W);
  expect_tensor(src.qzeros, "qzeros", DType::I32, O, ZW);
  expect_scales(src.scales, O, ZW * 8);
  // The GEMV word order is the canonical one: copy rows.
  std::memcpy(m.q.data(), src.qweight.data, static_cast<size_t>(O * W) * 4);
  for (int64_t n = 0; n < O; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const uint32_t z = load_u32(src.qzeros, n * ZW + g / 8);
      m.zeros[static_cast<size_t>(n * G + g)] = static_cast<uint8_t>((z >> (4 * (g % 8))) & 0xFu);
      m.scales[static_cast<size_t>(n * G + g)] = scale_bits(src.scales, n * ZW * 8 + g);
    }
  }
}

}  // namespace

int64_t awq_gemv_zeros_width(int64_t in, int group_size) {
  const int64_t mult = group_size >= 128 ? 1 : group_size == 64 ? 2 : group_size == 32 ? 4 : 0;
  check(mult > 0, "AWQ gemv: unsupported group size " + std::to_string(group_size) +
                      " (AutoAWQ GEMV supports 32, 64 and >= 128)");
  const int64_t base = (in / group_size + 7) / 8;
  return (base + mult - 1) / mult * mult;
}

Int4Matrix decode_awq(const AwqTensors& src) {
  std::string version = src.version;
  std::transform(version.begin(), version.end(), version.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  Int4Matrix m;
  m.out = src.out;
  m.in = src.in;
  m.group_size = src.group_size > 0 ? src.group_size : static_cast<int>(src.in);
  const std::string who = "AWQ linear '" + src.qweight.name + "'";
  check(m.out > 0 && m.in > 0, who + ": empty shape");
  check(m.in % m.group_size == 0, who + ": in_features " + std::to_string(m.in) +
                                      " is not a multiple of the group size " +
                                      std::to_string(m.group_size));
  check(m.group_size % 8 == 0,
        who + ": group size " + std::to_string(m.group_size) + " is not a multiple of 8");
  const int64_t G = m.in / m.group_size;
  m.q.assign(static_cast<size_t>(m.out * (m.in / 8)), 0);
  m.scales.assign(static_cast<size_t>(m.out * G), 0);
  m.zeros.assign(static_cast<size_t>(m.out * G), 0);
  if (version == "gemm")
    decode_gemm(src, m);
  else if (version == "gemv")
    decode_gemv(src, m);
  else
    throw Error(who + ": unsupported AWQ version '" + src.version + "' (gemm or gemv)");
  for (const TensorView* t : {&src.qweight, &src.qzeros, &src.scales})
    release_pages(t->data, t->nbytes);
  return m;
}

}  // namespace perfx
