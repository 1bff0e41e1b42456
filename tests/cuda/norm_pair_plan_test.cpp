// Which decode pairs the fused norm takes (w4a16_norm_pair_applies, linear.cuh;
// docs/cuda_linear_notes.md §30), on the host from the plan rules alone: TinyLlama's down → QKV pair
// at 1 and 8 tokens (both w4_gemv), not Llama-2-7B's (w4_gemv3), not a pair whose shapes do not
// chain, not outside 1..8 tokens. No GPU. (With PERFX_CUDA_NORM_FUSE=1 the device run checks the
// same through the plan log: tools/device/session_norm25.sh.)
#include <gtest/gtest.h>

#include "backend/cuda/linear.cuh"

namespace perfx::cuda {
namespace {

/// A W4 view's dimensions as pack_w4 sets them (no data: the plan reads only these).
W4View dims(int64_t N, int64_t K, int group) {
  W4View v;
  v.d.N = N;
  v.d.K = K;
  v.d.NB = (int)((N + 15) / 16);
  v.d.KC = (int)((K + 63) / 64);
  v.d.group_size = group;
  v.d.gs_shift = group == 32 ? 0 : group == 64 ? 1 : group == 128 ? 2 : 3;
  v.d.G = v.d.KC * 64 / group;
  return v;
}

TEST(NormPairPlan, TinyLlamaDownToQkvFuses) {
  const W4View down = dims(2048, 5632, 128), qkv = dims(2560, 2048, 128);
  EXPECT_TRUE(w4a16_norm_pair_applies(down, qkv, 1));
  EXPECT_TRUE(w4a16_norm_pair_applies(down, qkv, 8));
}

TEST(NormPairPlan, Llama7bPairsRunGemv3AndDoNotFuse) {
  const W4View down = dims(4096, 11008, 128), qkv = dims(12288, 4096, 128);
  EXPECT_FALSE(w4a16_norm_pair_applies(down, qkv, 1));
}

TEST(NormPairPlan, ShapesMustChainAndTokensStayInRange) {
  const W4View down = dims(2048, 5632, 128), qkv = dims(2560, 2048, 128);
  EXPECT_FALSE(w4a16_norm_pair_applies(down, dims(2560, 1024, 128), 1));  // N1 != K2
  EXPECT_FALSE(w4a16_norm_pair_applies(down, qkv, 0));
  EXPECT_FALSE(w4a16_norm_pair_applies(down, qkv, 9));
  EXPECT_FALSE(w4a16_norm_pair_applies(dims(8192, 512, 128), dims(64, 8192, 128), 1));  // K > 4096
}

}  // namespace
}  // namespace perfx::cuda
