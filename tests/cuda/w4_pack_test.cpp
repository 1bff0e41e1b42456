// pack_w4's record kinds (linear.cuh, docs/cuda_linear_notes.md §21), on the host: GGUF Q4_0
// (group 32, every zero 8) packs symmetric records, one per chunk holding both halves' scales;
// anything else keeps a scale/zero record per group. Every weight read back through the
// frag::w4_rec_index / w4_rec_of_half pair the kernels use equals Int4Matrix::dequant bit for bit,
// padding included. No GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cuda/linear.cuh"
#include "core/quantized.h"

namespace perfx::cuda {
namespace {

/// Random nibbles, scales of both signs in ±[0.004, 0.03]; zeros 8 (q4_0) or random 0..15.
Int4Matrix random_part(int64_t out, int64_t in, int group, bool q4_0, std::mt19937& rng) {
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

/// Packs parts [outs] × in and checks the record kind, the sz size and every weight.
void check(const std::vector<int64_t>& outs, int64_t in, int group, bool q4_0, bool allow_sym,
           bool want_sym) {
  std::mt19937 rng((uint32_t)(in * 31 + group + outs.size()));
  std::vector<Int4Matrix> parts;
  std::vector<const Int4Matrix*> ptrs;
  for (int64_t o : outs) parts.push_back(random_part(o, in, group, q4_0, rng));
  for (const auto& p : parts) ptrs.push_back(&p);
  const W4Packed p = pack_w4(ptrs, W4RowOrder::kStacked, allow_sym);
  ASSERT_EQ(p.d.sym, want_sym) << "in " << in << " group " << group;
  // symmetric: 8 bytes per (row block, chunk, gid) = 0.5 bit a weight; else per group
  EXPECT_EQ(p.d.G, want_sym ? p.d.KC : p.d.KC * 64 / group);
  EXPECT_EQ(p.sz.size() * 4, p.d.sz_bytes());
  int64_t r0 = 0, bad = 0;
  for (const Int4Matrix& m : parts) {
    for (int64_t r = 0; r < m.out; ++r)
      for (int64_t k = 0; k < in; ++k) bad += w4_packed_dequant(p, r0 + r, k) != m.dequant(r, k);
    r0 += m.out;
  }
  EXPECT_EQ(bad, 0) << "weights that differ from Int4Matrix::dequant";
}

TEST(W4Pack, GgufQ4_0GetsSymmetricRecords) {
  check({40, 24, 8}, 96, 32, true, true, true);  // K % 64 = 32: the last record's .y is padding
  check({24, 24}, 4128, 32, true, true, true);   // long K
  check({16}, 64, 32, true, false, false);       // refused: the pair layout, same weights
}

TEST(W4Pack, OtherMatricesKeepScaleZeroRecords) {
  check({40, 24, 8}, 96, 32, false, true, false);  // AWQ g32: real zeros
  check({136}, 640, 128, false, true, false);
  check({48}, 256, 64, true, true, false);  // zeros 8 but group 64: one record per chunk already
}

}  // namespace
}  // namespace perfx::cuda
