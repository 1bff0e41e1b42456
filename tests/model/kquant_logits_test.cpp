// GGUF k-quants end to end (issue 11): a small llama-arch GGUF whose matrices are Q4_K, Q5_K and
// Q6_K super-blocks (random bytes, sane fp16 scales; mixed kinds inside the fused QKV as in a
// Q4_K_M file), and its twin holding the same weights dequantized to F32 by the reference decoder.
// The exact path ("cpu-exact") must give the twin's logits to fp32 rounding; the default int8 path
// ("cpu": Q4_K on int4 kernels, Q5_K / Q6_K requantized to int8) within kInt8Tol.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/reference.h"
#include "core/dtype.h"
#include "model/model_test_util.h"
#include "unit/formats/formats_test_util.h"

namespace perfx::test {
namespace {

/// Measured max |Δlogit| 0.040 (logits up to 5.6); 2.5× headroom.
constexpr float kInt8Tol = 0.1f;

struct Pair {
  std::string kq, f32;  // tensor bytes in the k-quant file and in the F32 twin
};

/// A k-quant matrix [rows, cols] of `dt` (random blocks, fp16 d / dmin set) and its F32 twin.
Pair kquant(DType dt, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t bb = dtype_block_bytes(dt), nb = (size_t)(cols / 256);
  std::string q((size_t)rows * nb * bb, '\0');
  for (auto& c : q) c = (char)rng();
  for (size_t b = 0; b < (size_t)rows * nb; ++b) {
    char* blk = q.data() + b * bb;
    // |W| ~ 1 / sqrt(cols): Q4_K / Q5_K d·sc·q reaches 63 · 15 (31) · d, the mins center it.
    const float df = (dt == DType::Q6_K   ? 2e-5f
                      : dt == DType::Q5_K ? 1e-5f
                                          : 2e-5f) *
                     (1 + (float)(rng() % 4)) * 16.0f / std::sqrt((float)cols);
    const uint16_t d = fp32_to_fp16(df);
    const uint16_t dmin = fp32_to_fp16(df * (dt == DType::Q5_K ? 16.0f : 8.0f));
    if (dt == DType::Q6_K) {
      std::memcpy(blk + 208, &d, 2);
    } else {
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &dmin, 2);
    }
  }
  std::vector<float> deq((size_t)(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    cpu::dequantize_row(dt, q.data() + (size_t)r * nb * bb, deq.data() + r * cols, cols);
  return {q, f32_bytes(deq)};
}

uint32_t ggml_id(DType dt) {
  return dt == DType::Q4_K ? 12 : dt == DType::Q5_K ? 13 : 14;
}

TEST(KQuantLogits, ExactPathEqualsDequantizedTwinInt8PathWithinTolerance) {
  const int64_t H = 256, F = 512, V = 50, L = 2;
  std::mt19937 rng(5);
  GgufBuilder kq, twin;
  std::vector<std::string> toks;
  for (int i = 0; i < V; ++i)
    toks.push_back(std::string(1, (char)('A' + i % 26)) + std::to_string(i));
  for (GgufBuilder* b : {&kq, &twin}) {
    b->kv_str("general.architecture", "llama")
        .kv_u32("llama.context_length", 128)
        .kv_u32("llama.embedding_length", (uint32_t)H)
        .kv_u32("llama.block_count", (uint32_t)L)
        .kv_u32("llama.feed_forward_length", (uint32_t)F)
        .kv_u32("llama.attention.head_count", 4)
        .kv_u32("llama.attention.head_count_kv", 2)
        .kv_u32("llama.rope.dimension_count", 64)
        .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
        .kv_f32("llama.rope.freq_base", 10000.0f)
        .kv_str_array("tokenizer.ggml.tokens", toks)
        .kv_u32("tokenizer.ggml.bos_token_id", 1)
        .kv_u32("tokenizer.ggml.eos_token_id", 2);
  }
  auto dense = [&](const std::string& name, std::vector<uint64_t> ne, float amp) {
    std::normal_distribution<float> nd(0.0f, amp);
    size_t n = 1;
    for (uint64_t e : ne) n *= (size_t)e;
    std::vector<float> v(n);
    for (auto& x : v) x = amp == 0.0f ? 1.0f : nd(rng);
    const std::string bytes = f32_bytes(v);
    kq.tensor(name, ne, 0, bytes);
    twin.tensor(name, ne, 0, bytes);
  };
  auto quant = [&](const std::string& name, DType dt, int64_t rows, int64_t cols) {
    const Pair p = kquant(dt, rows, cols, rng);
    kq.tensor(name, {(uint64_t)cols, (uint64_t)rows}, ggml_id(dt), p.kq);
    twin.tensor(name, {(uint64_t)cols, (uint64_t)rows}, 0, p.f32);
  };
  dense("token_embd.weight", {(uint64_t)H, (uint64_t)V}, 1.0f);
  for (int l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    dense(p + "attn_norm.weight", {(uint64_t)H}, 0.0f);
    dense(p + "ffn_norm.weight", {(uint64_t)H}, 0.0f);
    quant(p + "attn_q.weight", DType::Q4_K, H, H);
    quant(p + "attn_k.weight", DType::Q4_K, 128, H);
    quant(p + "attn_v.weight", DType::Q6_K, 128, H);  // Q4_K_M keeps some v in Q6_K
    quant(p + "attn_output.weight", DType::Q5_K, H, H);
    quant(p + "ffn_gate.weight", DType::Q4_K, F, H);
    quant(p + "ffn_up.weight", DType::Q5_K, F, H);
    quant(p + "ffn_down.weight", DType::Q6_K, H, F);
  }
  dense("output_norm.weight", {(uint64_t)H}, 0.0f);
  quant("output.weight", DType::Q6_K, V, H);
  TempDir d;
  write_bytes(d.file("kq.gguf"), kq.build());
  write_bytes(d.file("twin.gguf"), twin.build());
  const std::vector<int32_t> ids = {1, 7, 3, 44, 12, 9, 30, 5, 21};
  int64_t v1 = 0, v2 = 0, v3 = 0;
  const auto ref = model_logits(d.file("twin.gguf"), ids, &v1, "cpu-exact");
  const auto exact = model_logits(d.file("kq.gguf"), ids, &v2, "cpu-exact");
  const auto fast = model_logits(d.file("kq.gguf"), ids, &v3, "cpu");
  ASSERT_EQ(v1, V);
  ASSERT_EQ(v2, V);
  ASSERT_EQ(v3, V);
  float scale = 0;
  for (float x : ref) scale = std::max(scale, std::fabs(x));
  const float de = max_abs_diff(exact, ref), df = max_abs_diff(fast, ref);
  std::printf("  k-quant GGUF: max |logit| %.3g; exact path max |dlogit| %.3g, int8 path %.3g\n",
              scale, de, df);
  EXPECT_GT(scale, 0.1f) << "logits too small for the comparison to mean anything";
  EXPECT_LE(de, 1e-4f * std::max(1.0f, scale));
  EXPECT_LE(df, kInt8Tol);
  // --lm-head-type keeps an lm_head already in GGUF blocks (this Q6_K output.weight) as stored,
  // while it quantizes the float twin's.
  ModelOptions q8;
  q8.lm_head_type = DType::Q8_0;
  int64_t v4 = 0;
  EXPECT_EQ(max_abs_diff(model_logits(d.file("kq.gguf"), ids, &v4, "cpu-exact", q8), exact), 0.0f);
  EXPECT_GT(max_abs_diff(model_logits(d.file("twin.gguf"), ids, &v4, "cpu-exact", q8), ref), 0.0f);
}

}  // namespace
}  // namespace perfx::test
