// Random canonical int4 matrices for the CUDA backend's host tests (test_cuda_host).
#pragma once

#include <cstdint>
#include <random>

#include "core/quantized.h"

namespace perfx::cuda {

/// Int4Matrix [out, in] with group size `group` (in a multiple of it): random nibbles, fp16 scales
/// of random sign with |scale| in [0.004, 0.03], zeros random in 0..15, or all 8 when `q4_0` (GGUF
/// Q4_0's rule: pack_w4 then packs symmetric records at group 32).
inline Int4Matrix random_int4(int64_t out, int64_t in, int group, bool q4_0, std::mt19937& rng) {
  Int4Matrix m;
  m.out = out;
  m.in = in;
  m.group_size = group;
  std::uniform_int_distribution<uint32_t> word;
  std::uniform_int_distribution<int> zero(0, 15);
  std::uniform_real_distribution<float> scale(0.004f, 0.03f);
  m.q.resize((size_t)(out * in / 8));
  for (auto& w : m.q) w = word(rng);
  for (int64_t i = 0; i < out * (in / group); ++i) {
    m.scales.push_back(fp32_to_fp16((word(rng) & 1) ? scale(rng) : -scale(rng)));
    m.zeros.push_back(q4_0 ? (uint8_t)8 : (uint8_t)zero(rng));
  }
  return m;
}

}  // namespace perfx::cuda
