// pack_w4's record kinds (linear.cuh, docs/cuda_linear_notes.md §21), on the host: GGUF Q4_0
// (group 32, every zero 8) packs symmetric records, one per chunk holding both halves' scales;
// anything else keeps a scale/zero record per group. Every weight read back through the
// frag::w4_rec_index / w4_rec_of_half pair the kernels use equals Int4Matrix::dequant bit for bit,
// and every padded weight (rows >= N, channels >= K) reads 0 because its scale is 0 — symmetric
// records imply zero 8, so a padded half's .y must be 0 (w4_gemv3 multiplies stale activations
// by it). No GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "core/quantized.h"
#include "random_int4.h"

namespace perfx::cuda {
namespace {

/// Packs parts [outs] × in and checks the record kind, the sz size, every weight and the padding.
void check_pack(const std::vector<int64_t>& outs, int64_t in, int group, bool q4_0, bool allow_sym,
                bool want_sym) {
  std::mt19937 rng((uint32_t)(in * 31 + group + outs.size()));
  std::vector<Int4Matrix> parts;
  std::vector<const Int4Matrix*> ptrs;
  for (int64_t o : outs) parts.push_back(random_int4(o, in, group, q4_0, rng));
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
  // Padding: rows N..16·NB and channels K..64·KC dequantize to 0; their records' scales are 0.
  int64_t bad_pad = 0, bad_scale = 0;
  for (int64_t r = 0; r < (int64_t)p.d.NB * 16; ++r)
    for (int64_t k = 0; k < (int64_t)p.d.KC * 64; ++k) {
      if (r < p.d.N && k < in) continue;
      bad_pad += w4_packed_dequant(p, r, k) != 0.0f;
      const int64_t nb = r / 16, hc = k / 32;
      const int gid = (int)(r % 8), hi = (int)((r % 16) / 8);
      const int64_t idx = frag::w4_rec_index(p.d.G, p.d.gs_shift, p.d.sym, nb, hc, gid);
      const uint2 rec = frag::w4_rec_of_half(
          make_uint2(p.sz[(size_t)(2 * idx)], p.sz[(size_t)(2 * idx + 1)]), p.d.sym, hc);
      bad_scale += ((rec.x >> (16 * hi)) & 0xFFFFu) != 0;
    }
  EXPECT_EQ(bad_pad, 0) << "padded weights that are not 0";
  EXPECT_EQ(bad_scale, 0) << "padded weights whose record scale is not 0";
}

TEST(W4Pack, GgufQ4_0GetsSymmetricRecords) {
  check_pack({40, 24, 8}, 96, 32, true, true,
             true);                                  // K % 64 = 32: the last record's .y is padding
  check_pack({24, 24}, 4128, 32, true, true, true);  // long K
  check_pack({16}, 64, 32, true, false, false);      // refused: the pair layout, same weights
}

TEST(W4Pack, OtherMatricesKeepScaleZeroRecords) {
  check_pack({40, 24, 8}, 96, 32, false, true, false);  // AWQ g32: real zeros
  check_pack({136}, 640, 128, false, true, false);
  check_pack({48}, 256, 64, true, true,
             false);  // zeros 8 but group 64: one record per chunk already
}

}  // namespace
}  // namespace perfx::cuda
