// Which decode GEMVs take a NormLink (linear_w4a16_links_norm; docs/cuda_linear_notes.md §22), on
// the host: the plan alone decides, so no GPU. The 7B gate|up projection (N = 22016: 1,376 row
// blocks, more than kNormParts) runs w4_gemv3, whose grid is one wave, so it links both as the
// consumer (after the o projection's add + RMSNorm) and as a producer; a first version refused
// every weight with more row blocks than kNormParts and so left the 7B o → gate|up pair unfused.
#include <gtest/gtest.h>

#include "backend/cuda/linear.cuh"

namespace perfx::cuda {
namespace {

W4View shape(int64_t N, int64_t K, int group) {
  W4View v;
  v.d.N = N;
  v.d.K = K;
  v.d.NB = (int)((N + 15) / 16);
  v.d.KC = (int)((K + 63) / 64);
  v.d.group_size = group;
  v.d.gs_shift = group == 32 ? 0 : group == 64 ? 1 : group == 128 ? 2 : 3;
  v.d.G = (int)(v.d.KC * 64 / group);
  return v;
}

TEST(NormLinkPlan, WideW4Gemv3LinksBothWays) {
  const W4View gate_up = shape(22016, 4096, 128);
  ASSERT_GT(gate_up.d.NB, kNormParts);
  ASSERT_EQ(w4a16_plan(gate_up, 1, false).kernel, LinearKernel::Gemv3);
  EXPECT_TRUE(linear_w4a16_links_norm(gate_up, 1, false));
  EXPECT_TRUE(linear_w4a16_links_norm(gate_up, 8, false));
  EXPECT_TRUE(linear_w4a16_links_norm(gate_up, 1, true));
  const W4View o = shape(4096, 4096, 128);  // the o projection, producer of that pair
  EXPECT_TRUE(linear_w4a16_links_norm(o, 1, true));
}

}  // namespace
}  // namespace perfx::cuda
