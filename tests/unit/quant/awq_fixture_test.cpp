// Issue 4 acceptance: AutoAWQ checkpoints packed by an independent PyTorch implementation
// (tests/fixtures/tiny-awq-{gemm,gemv}, tools/reference/make_tiny_fixtures.py) load through the
// model's AWQ path and the W4A16 CPU kernels, and their logits match transformers' logits of the
// dequantized weights within 1e-2 on the exact fp32-activation path ("cpu-exact", i.e.
// PERFX_ACT_QUANT=off). The default int8-activation path ("cpu", issue 11) is held to a stated
// tolerance against the same reference: kInt8ActLogitTol.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "model/weights.h"
#include "runtime/kv_cache.h"
#include "support/test_support.h"

using namespace perfx;

namespace {

/// int8 activations per block of 32 on these tiny random-weight models (hidden 64, logits of
/// magnitude ~3): measured max |Δlogit| 0.070 on both (the exact path: 4e-6); the bound keeps ~2× headroom.
constexpr float kInt8ActLogitTol = 0.15f;

std::vector<float> run_logits(const std::string& path, const std::vector<int32_t>& ids,
                              const std::string& device) {
  Checkpoint ck = open_checkpoint(path);
  EXPECT_TRUE(ck.config.quant.enabled);
  auto be = create_backend(device, 2);
  LlamaModel model(ck, *be);
  const ModelConfig& c = model.config();
  const int bs = 16, n_blocks = (static_cast<int>(ids.size()) + bs - 1) / bs;
  BlockManager bm(n_blocks, bs);
  auto kv = be->create_kv(static_cast<int>(c.num_hidden_layers), n_blocks, bs,
                          static_cast<int>(c.num_key_value_heads), static_cast<int>(c.head_dim));
  bm.add_sequence(1);
  BatchLayout b;
  b.n_tokens = static_cast<int>(ids.size());
  b.token_ids = ids;
  b.slots = bm.append(1, ids);
  for (int i = 0; i < b.n_tokens; ++i) {
    b.positions.push_back(i);
    b.token_seq.push_back(0);
    b.logit_rows.push_back(i);
  }
  b.n_seqs = 1;
  b.block_tables = bm.block_table(1);
  b.max_blocks = static_cast<int>(b.block_tables.size());
  std::vector<float> logits;
  model.forward(b, *kv, logits);
  return logits;
}

void check_fixture(const std::string& name, const std::string& device, float tol) {
  const std::string dir = test::source_dir() + "/tests/fixtures/" + name;
  if (!test::path_exists_for_test(dir + "/model.safetensors"))
    GTEST_SKIP() << "fixture missing: " << dir;
  auto ref = SafetensorsFile::open(dir + "/reference_logits.safetensors");
  const TensorView* in = ref->find("input_ids");
  const TensorView* lg = ref->find("logits");
  ASSERT_TRUE(in && lg);
  ASSERT_EQ(in->dtype, DType::I32);
  std::vector<int32_t> ids(static_cast<size_t>(in->numel()));
  std::memcpy(ids.data(), in->data, in->nbytes);
  std::vector<float> want(static_cast<size_t>(lg->numel()));
  std::memcpy(want.data(), lg->data, lg->nbytes);
  const std::vector<float> got = run_logits(dir, ids, device);
  ASSERT_EQ(got.size(), want.size());
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  std::printf("%s on %s: max |dlogit| = %.3g over %zu logits\n", name.c_str(), device.c_str(), worst,
              got.size());
  EXPECT_LE(worst, tol);
}

}  // namespace

TEST(AwqFixtures, GemmLogitsMatchTransformers) {
  check_fixture("tiny-awq-gemm", "cpu-exact", 1e-2f);
}
TEST(AwqFixtures, GemvLogitsMatchTransformers) {
  check_fixture("tiny-awq-gemv", "cpu-exact", 1e-2f);
}
TEST(AwqFixtures, GemmLogitsOnInt8ActivationsWithinStatedTolerance) {
  check_fixture("tiny-awq-gemm", "cpu", kInt8ActLogitTol);
}
TEST(AwqFixtures, GemvLogitsOnInt8ActivationsWithinStatedTolerance) {
  check_fixture("tiny-awq-gemv", "cpu", kInt8ActLogitTol);
}
