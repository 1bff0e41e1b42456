// The W4A8 decode GEMV's data flow (w4_gemv3 with W4Gemv3Config::a8, docs/cuda_linear_notes.md
// §13), emulated on the host over pack_w4's real image: each word's low / high nibbles as the
// m16n8k32 u8 A fragment of rows gid / gid + 8 at channels b + {0, 2, 1, 3}, the activations
// quantized per group and stored in that order (W4A8Act), the int32 group sums and the epilogue
// scale · d · (Σ q x − zero · Σ x). Checked against Σ_k W[r, k] · d_g · xq[k] computed from the
// Int4Matrix directly. The A registers and the activations' byte order come from the kernels' own
// helpers (frag::w4a8_a_reg, frag::a8_store4), so a wrong nibble / byte order there fails here
// without a GPU; the kernel's loads and epilogue are restated, not shared (the GPU runs the
// conformance suite with PERFX_CUDA_W4A8=1 for those).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "core/quantized.h"
#include "random_int4.h"

namespace perfx::cuda {
namespace {

/// quantize_act_q8's contract for one row: per group d = max|x| / 127, q = round-half-even(x ·
/// (127 / max|x|)), each 4 channels stored by frag::a8_store4 (the kernel's own helper); meta
/// {d bits, Σ q}.
void quantize_row(const float* x, int64_t K, int group, int8_t* xq_stored, int8_t* xq_plain,
                  int2* meta) {
  for (int64_t g0 = 0; g0 < K; g0 += group) {
    float amax = 0.0f;
    for (int64_t k = g0; k < g0 + group; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int64_t k = g0; k < g0 + group; ++k) {
      xq_plain[k] = (int8_t)std::nearbyint(x[k] * id);
      s += xq_plain[k];
    }
    std::memcpy(&meta[g0 / group].x, &d, 4);
    meta[g0 / group].y = s;
  }
  for (int64_t k = 0; k < K; k += 4) {
    const uint32_t w =
        frag::a8_store4(xq_plain[k], xq_plain[k + 1], xq_plain[k + 2], xq_plain[k + 3]);
    std::memcpy(xq_stored + k, &w, 4);
  }
}

uint8_t byte_of(uint32_t w, int i) {
  return (uint8_t)(w >> (8 * i));
}

/// One output row block (16 rows) x M <= 8 tokens, as the kernel's lanes compute it: A and B
/// assembled from the 32 lanes' registers by the m16n8k32 fragment layout (lane (gid, tid) loads
/// token min(gid, M - 1)'s activations), C's columns 2 tid, 2 tid + 1 read as the lane's tokens.
void emulate_block(const W4Packed& p, int64_t nb, int M, const std::vector<int8_t>& xq,
                   const std::vector<int2>& meta, float out[16][8]) {
  const int64_t K = p.d.K, n_groups = K / p.d.group_size;
  const int group = p.d.group_size;
  for (int r = 0; r < 16; ++r)
    for (int t = 0; t < 8; ++t) out[r][t] = 0.0f;
  int64_t C[16][8] = {};
  for (int64_t kc = 0; kc < K / 64; ++kc) {
    for (int h = 0; h < 2; ++h) {
      int A[16][32], B[32][8];
      for (int lane = 0; lane < 32; ++lane) {
        const int gid = lane >> 2, tid = lane & 3;
        const size_t qi = (size_t)frag::w4_q_index(p.d.KC, nb, kc, lane) * 4;
        const uint32_t w0 = p.q[qi + 2 * h], w1 = p.q[qi + 2 * h + 1];
        const uint32_t a[4] = {frag::w4a8_a_reg(w0, 0), frag::w4a8_a_reg(w0, 1),
                               frag::w4a8_a_reg(w1, 0), frag::w4a8_a_reg(w1, 1)};
        const size_t xo = (size_t)(std::min(gid, M - 1) * K + 64 * kc + 32 * h + 8 * tid);
        for (int i = 0; i < 4; ++i) {
          A[gid][4 * tid + i] = byte_of(a[0], i);
          A[gid + 8][4 * tid + i] = byte_of(a[1], i);
          A[gid][16 + 4 * tid + i] = byte_of(a[2], i);
          A[gid + 8][16 + 4 * tid + i] = byte_of(a[3], i);
          B[4 * tid + i][gid] = xq[xo + (size_t)i];
          B[16 + 4 * tid + i][gid] = xq[xo + 4 + (size_t)i];
        }
      }
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n)
          for (int k = 0; k < 32; ++k) C[r][n] += (int64_t)A[r][k] * B[k][n];
      const int64_t ch_end = 64 * kc + 32 * h + 32;
      if (ch_end % group != 0) continue;
      const int64_t g = ch_end / group - 1;  // the group's end: the epilogue
      for (int lane = 0; lane < 32; ++lane) {
        const int gid = lane >> 2, tid = lane & 3;
        const int64_t hc = ch_end / 32 - 1;  // the group's last half-chunk
        const size_t si = (size_t)frag::w4_rec_index(p.d.G, p.d.gs_shift, p.d.sym, nb, hc, gid) * 2;
        const uint2 rec = frag::w4_rec_of_half(make_uint2(p.sz[si], p.sz[si + 1]), p.d.sym, hc);
        const uint32_t sx = rec.x, zy = rec.y;
        for (int i = 0; i < 4; ++i) {
          const int hi = i >> 1, r = gid + 8 * hi, t = 2 * tid + (i & 1);
          const int2 m = meta[(size_t)(std::min(t, M - 1) * n_groups + g)];
          float d;
          std::memcpy(&d, &m.x, 4);
          const float s = fp16_to_fp32((uint16_t)(sx >> (16 * hi)));
          const int z = (int)((zy >> (8 * hi)) & 0xFFu);
          out[r][t] = std::fma(s * d, (float)(C[r][t] - (int64_t)z * m.y), out[r][t]);
        }
      }
      for (auto& row : C)
        for (auto& c : row) c = 0;
    }
  }
}

void check_shape(int64_t N, int64_t K, int group, int M, uint32_t seed, bool sym = false) {
  std::mt19937 rng(seed);
  const Int4Matrix m = random_int4(N, K, group, sym, rng);
  const W4Packed p = pack_w4({&m});
  ASSERT_EQ(p.d.sym, sym && group == 32);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x((size_t)(M * K));
  for (auto& v : x) v = nd(rng);
  x[(size_t)(K / 3)] = 9.0f;  // an outlier in one group
  const int64_t n_groups = K / group;
  std::vector<int8_t> xq_stored((size_t)(M * K)), xq_plain((size_t)(M * K));
  std::vector<int2> meta((size_t)(M * n_groups));
  for (int t = 0; t < M; ++t)
    quantize_row(&x[(size_t)(t * K)], K, group, &xq_stored[(size_t)(t * K)],
                 &xq_plain[(size_t)(t * K)], &meta[(size_t)(t * n_groups)]);
  for (int64_t nb = 0; nb < p.d.NB; ++nb) {
    float got[16][8];
    emulate_block(p, nb, M, xq_stored, meta, got);
    for (int r = 0; r < 16 && nb * 16 + r < N; ++r) {
      const int64_t row = nb * 16 + r;
      for (int t = 0; t < M; ++t) {
        double ref = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          float d;
          std::memcpy(&d, &meta[(size_t)(t * n_groups + k / group)].x, 4);
          const double v = (double)m.dequant(row, k) * d * xq_plain[(size_t)(t * K + k)];
          ref += v;
          mag += std::fabs(v);
        }
        EXPECT_NEAR(got[r][t], ref, 1e-5 * mag + 1e-6)
            << "N=" << N << " K=" << K << " group " << group << " row " << row << " token " << t;
      }
    }
  }
}

TEST(W4A8Layout, GroupSumsMatchTheDequantizedWeights) {
  check_shape(48, 256, 128, 1, 1);
  check_shape(40, 384, 64, 3, 2);        // 40 rows: a partly padded row block; 3 tokens
  check_shape(16, 128, 32, 8, 3);        // group 32: one group per half-chunk; 8 tokens
  check_shape(40, 192, 32, 3, 5, true);  // GGUF Q4_0: symmetric records (both halves' scales)
  check_shape(32, 1024, 128, 5, 4);
}

TEST(W4A8Layout, WorkspaceIsTheInt8RowsThenOneRecordPerGroup) {
  // act_q8_bytes: the int8 rows, rounded up to 256 bytes, then 8 bytes per group record
  EXPECT_EQ(act_q8_bytes(1, 4096, 128), 4096u + 32u * 8u);
  EXPECT_EQ(act_q8_bytes(3, 384, 32), 1280u + 3u * 12u * 8u);
}

}  // namespace
}  // namespace perfx::cuda
