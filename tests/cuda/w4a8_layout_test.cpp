// The W4A8 decode GEMV's data flow (w4_gemv3 with W4Gemv3Config::a8, docs/cuda_linear_notes.md
// §13), emulated on the host over pack_w4's real image: each word's low / high nibbles as the
// m16n8k32 u8 A fragment of rows gid / gid + 8 at channels b + {0, 2, 1, 3}, the activations
// quantized per group and stored in that order (W4A8Act), the int32 group sums and the epilogue
// scale · d · (Σ q x − zero · Σ x). Checked against Σ_k W[r, k] · d_g · xq[k] computed from the
// Int4Matrix directly, so a wrong byte order, permutation, zero correction or record layout fails
// here without a GPU (the GPU itself runs the conformance suite with PERFX_CUDA_W4A8=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "core/quantized.h"

namespace perfx::cuda {
namespace {

Int4Matrix random_int4(int64_t out, int64_t in, int group, std::mt19937& rng) {
  Int4Matrix m;
  m.out = out;
  m.in = in;
  m.group_size = group;
  std::uniform_int_distribution<uint32_t> word;
  std::uniform_int_distribution<int> zero(0, 15);
  std::uniform_real_distribution<float> scale(0.01f, 0.1f);
  m.q.resize((size_t)(out * in / 8));
  for (auto& w : m.q) w = word(rng);
  for (int64_t i = 0; i < out * (in / group); ++i) {
    m.scales.push_back(fp32_to_fp16(scale(rng)));
    m.zeros.push_back((uint8_t)zero(rng));
  }
  return m;
}

/// quantize_act_q8's contract for one row: per group d = max|x| / 127, q = round-half-even(x ·
/// 127 / max|x|), stored with each 4 channels in the order 0, 2, 1, 3; meta {d bits, Σ q}.
void quantize_row(const std::vector<float>& x, int group, std::vector<int8_t>& xq_stored,
                  std::vector<int8_t>& xq_plain, std::vector<int2>& meta) {
  const size_t K = x.size();
  xq_stored.assign(K, 0);
  xq_plain.assign(K, 0);
  meta.clear();
  for (size_t g0 = 0; g0 < K; g0 += (size_t)group) {
    float amax = 0.0f;
    for (size_t k = g0; k < g0 + (size_t)group; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (size_t k = g0; k < g0 + (size_t)group; ++k) {
      xq_plain[k] = (int8_t)std::nearbyint(x[k] * id);
      s += xq_plain[k];
    }
    int2 m;
    std::memcpy(&m.x, &d, 4);
    m.y = s;
    meta.push_back(m);
  }
  static const int order[4] = {0, 2, 1, 3};
  for (size_t k = 0; k < K; ++k) xq_stored[k] = xq_plain[k - k % 4 + (size_t)order[k % 4]];
}

uint8_t byte_of(uint32_t w, int i) {
  return (uint8_t)(w >> (8 * i));
}

/// One output row block (16 rows) x one token, as the kernel computes it for M = 1.
void emulate_block(const W4Packed& p, int64_t nb, const std::vector<int8_t>& xq,
                   const std::vector<int2>& meta, float out[16]) {
  const int64_t K = p.d.K;
  const int group = p.d.group_size;
  for (int r = 0; r < 16; ++r) out[r] = 0.0f;
  std::vector<int64_t> csum(16, 0);  // the running int32 C of rows 0..15 (token column 0)
  for (int64_t kc = 0; kc < K / 64; ++kc) {
    for (int h = 0; h < 2; ++h) {
      // A [16][32] and B [32] from the 32 lanes' registers, by the m16n8k32 fragment layout
      int A[16][32];
      int B[32];
      for (int lane = 0; lane < 32; ++lane) {
        const int gid = lane >> 2, tid = lane & 3;
        const size_t qi = (size_t)frag::w4_q_index(p.d.KC, nb, kc, lane) * 4;
        const uint32_t w0 = p.q[qi + 2 * h], w1 = p.q[qi + 2 * h + 1];
        const uint32_t a[4] = {w0 & 0x0F0F0F0Fu, (w0 >> 4) & 0x0F0F0F0Fu, w1 & 0x0F0F0F0Fu,
                               (w1 >> 4) & 0x0F0F0F0Fu};
        for (int i = 0; i < 4; ++i) {
          A[gid][4 * tid + i] = byte_of(a[0], i);
          A[gid + 8][4 * tid + i] = byte_of(a[1], i);
          A[gid][16 + 4 * tid + i] = byte_of(a[2], i);
          A[gid + 8][16 + 4 * tid + i] = byte_of(a[3], i);
        }
        if (gid == 0) {  // token 0's activations: 8 bytes at 64 kc + 32 h + 8 tid
          const size_t xo = (size_t)(64 * kc + 32 * h + 8 * tid);
          for (int i = 0; i < 4; ++i) {
            B[4 * tid + i] = xq[xo + (size_t)i];
            B[16 + 4 * tid + i] = xq[xo + 4 + (size_t)i];
          }
        }
      }
      for (int r = 0; r < 16; ++r)
        for (int k = 0; k < 32; ++k) csum[(size_t)r] += (int64_t)A[r][k] * B[k];
      const int64_t ch_end = 64 * kc + 32 * h + 32;
      if (ch_end % group == 0) {  // the group's end: the epilogue
        const int64_t g = ch_end / group - 1;
        float d;
        std::memcpy(&d, &meta[(size_t)g].x, 4);
        for (int gid = 0; gid < 8; ++gid) {
          const size_t si = (size_t)frag::w4_sz_index(p.d.G, nb, g, gid) * 2;
          const uint32_t sx = p.sz[si], zy = p.sz[si + 1];
          for (int hi = 0; hi < 2; ++hi) {
            const int r = gid + 8 * hi;
            const float s = fp16_to_fp32((uint16_t)(sx >> (16 * hi)));
            const int z = (int)((zy >> (8 * hi)) & 0xFFu);
            out[r] =
                std::fma(s * d, (float)(csum[(size_t)r] - (int64_t)z * meta[(size_t)g].y), out[r]);
          }
        }
        std::fill(csum.begin(), csum.end(), 0);
      }
    }
  }
}

void check_shape(int64_t N, int64_t K, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  const Int4Matrix m = random_int4(N, K, group, rng);
  const W4Packed p = pack_w4({&m});
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x((size_t)K);
  for (auto& v : x) v = nd(rng);
  x[(size_t)(K / 3)] = 9.0f;  // an outlier in one group
  std::vector<int8_t> xq_stored, xq_plain;
  std::vector<int2> meta;
  quantize_row(x, group, xq_stored, xq_plain, meta);
  for (int64_t nb = 0; nb < p.d.NB; ++nb) {
    float got[16];
    emulate_block(p, nb, xq_stored, meta, got);
    for (int r = 0; r < 16 && nb * 16 + r < N; ++r) {
      const int64_t row = nb * 16 + r;
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        float d;
        std::memcpy(&d, &meta[(size_t)(k / group)].x, 4);
        const double t = (double)m.dequant(row, k) * d * xq_plain[(size_t)k];
        ref += t;
        mag += std::fabs(t);
      }
      EXPECT_NEAR(got[r], ref, 1e-5 * mag + 1e-6)
          << "N=" << N << " K=" << K << " group " << group << " row " << row;
    }
  }
}

TEST(W4A8Layout, GroupSumsMatchTheDequantizedWeights) {
  check_shape(48, 256, 128, 1);
  check_shape(40, 384, 64, 2);  // 40 rows: a partly padded row block
  check_shape(16, 128, 32, 3);  // group 32: one group per half-chunk
  check_shape(32, 1024, 128, 4);
}

TEST(W4A8Layout, A8NeedsGroupsUpTo128AndKMultipleOf128) {
  // act_q8_bytes: the int8 row, rounded to 256 bytes, then 8 bytes per group record
  EXPECT_EQ(act_q8_bytes(1, 4096, 128), 4096u + 32u * 8u);
  EXPECT_EQ(act_q8_bytes(3, 384, 32), 1280u + 3u * 12u * 8u);
}

}  // namespace
}  // namespace perfx::cuda
