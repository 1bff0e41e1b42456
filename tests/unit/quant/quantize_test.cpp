// The quantize pipeline: the calibration layer runner against the model's own forward, RTN / AWQ
// checkpoints written in the AutoAWQ GEMM format and loaded back through the model, the
// width rule for modules_to_not_convert, the sharded writer and the calibration blocks.
#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/backend.h"
#include "core/mmap.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "model/weights.h"
#include "perfx/engine.h"
#include "perfx/status.h"
#include "perfx/tokenizer.h"
#include "quant/calib.h"
#include "quant/checkpoint_writer.h"
#include "quant/int4.h"
#include "quant/layer_runner.h"
#include "runtime/kv_cache.h"
#include "support/test_support.h"

using namespace perfx;
using namespace perfx::quant;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/" + name;
}

/// A fresh empty folder under the build tree.
std::string temp_dir(const std::string& name) {
  const std::string d = std::string(PERFX_BINARY_DIR) + "/test_tmp/quant/" + name;
  fs::remove_all(d);
  fs::create_directories(fs::path(d).parent_path());
  return d;
}

/// Logits [T, vocab] of the checkpoint at `path` for one sequence (all rows).
std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& ids) {
  Checkpoint ck = open_checkpoint(path);
  auto be = create_backend("cpu", 2);
  LlamaModel model(ck, *be);
  const ModelConfig& c = model.config();
  const int bs = 16, nb = (static_cast<int>(ids.size()) + bs - 1) / bs;
  BlockManager bm(nb, bs);
  auto kv = be->create_kv(static_cast<int>(c.num_hidden_layers), nb, bs,
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

std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& v : ids) v = static_cast<int32_t>(rng() % vocab);
  return ids;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

/// sqrt(mean((a − b)²)) / std(a): the logit error relative to the logit spread.
float relative_rms(const std::vector<float>& a, const std::vector<float>& b);

float stddev(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
  }
  const double m = s / v.size();
  return static_cast<float>(std::sqrt(s2 / v.size() - m * m));
}

std::vector<float> read_f32(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint16_t h;
    if (t.dtype == DType::F32) {
      std::memcpy(&v[i], static_cast<const char*>(t.data) + 4 * i, 4);
      continue;
    }
    std::memcpy(&h, static_cast<const char*>(t.data) + 2 * i, 2);
    v[i] = t.dtype == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
  return v;
}

float relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i] - b[i]) * (a[i] - b[i]);
  return static_cast<float>(std::sqrt(s / a.size())) / stddev(a);
}

}  // namespace

// The runner executes each layer through LlamaModel; chaining its layer outputs and finishing with
// the final norm and lm_head on the host must give the model's own logits.
TEST(LayerRunner, ChainedLayersReproduceModelLogits) {
  for (const char* name : {"tiny-qwen2", "tiny-qwen3", "tiny-llama3"}) {
    const std::string dir = fixture(name);
    if (!test::path_exists_for_test(dir + "/model.safetensors")) GTEST_SKIP() << "no " << dir;
    Checkpoint ck = open_checkpoint(dir);
    const ModelConfig& c = ck.config;
    const int seq = 24, nblk = 2;
    const std::vector<int32_t> ids = random_ids(seq * nblk, static_cast<int>(c.vocab_size), 5);
    // Embedding rows as the layer-0 input.
    const TensorView& emb = require_tensor(ck, "model.embed_tokens.weight");
    const std::vector<float> table = read_f32(emb);
    Matrix x(seq * nblk, c.hidden_size);
    for (int t = 0; t < seq * nblk; ++t)
      std::memcpy(x.row(t), table.data() + ids[t] * c.hidden_size, c.hidden_size * 4);
    auto be = create_backend("cpu", 2);
    ModelLayerRunner runner(c, *be, nblk, seq, nullptr);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      DecoderLayerF32 L = load_decoder_layer(ck, l);
      runner.set_input(&x);
      LayerInputs X;
      Matrix next;
      runner.capture(L, X, next);
      // The captured attention output reproduces the block output the runner reports.
      Matrix attn;
      runner.attention(L, L.q, L.k, L.v, attn);
      Matrix o_ref;
      matmul_wt(X.o, L.o, o_ref);
      ASSERT_LT(mse(attn, o_ref), 1e-12);
      x = std::move(next);
    }
    // Final norm + lm_head on the host, per block; compare with the model on each block alone.
    const std::vector<float> fnorm = read_f32(require_tensor(ck, "model.norm.weight"));
    const TensorView* head = ck.source->find("lm_head.weight");
    const std::vector<float> hw = head ? read_f32(*head) : table;
    for (int blk = 0; blk < nblk; ++blk) {
      const std::vector<int32_t> bid(ids.begin() + blk * seq, ids.begin() + (blk + 1) * seq);
      const std::vector<float> want = logits_of(dir, bid);
      std::vector<float> got;
      for (int t = 0; t < seq; ++t) {
        const float* h = x.row(blk * seq + t);
        double ss = 0;
        for (int i = 0; i < c.hidden_size; ++i) ss += double(h[i]) * h[i];
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / c.hidden_size) + c.rms_norm_eps);
        for (int64_t v = 0; v < c.vocab_size; ++v) {
          double acc = 0;
          for (int i = 0; i < c.hidden_size; ++i)
            acc += double(h[i] * inv * fnorm[i]) * hw[v * c.hidden_size + i];
          got.push_back(static_cast<float>(acc));
        }
      }
      EXPECT_LT(max_abs_diff(got, want), 1e-4f) << name << " block " << blk;
    }
  }
}

TEST(Quantize, RtnCheckpointLoadsAndMatches) {
  const std::string in = fixture("tiny-qwen2");  // q/k/v biases, tied embeddings
  if (!test::path_exists_for_test(in + "/model.safetensors")) GTEST_SKIP() << "no " << in;
  const std::string out = temp_dir("rtn-qwen2");
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.method = "rtn";
  o.group_size = 32;  // hidden 64
  o.progress = false;
  const QuantizeSummary s = quantize_model(o);
  EXPECT_EQ(s.n_linears_quantized, 14);
  EXPECT_TRUE(s.not_converted.empty());

  Checkpoint q = open_checkpoint(out);
  EXPECT_TRUE(q.config.quant.enabled);
  EXPECT_EQ(q.config.quant.group_size, 32);
  EXPECT_EQ(q.config.quant.version, "gemm");
  EXPECT_EQ(q.source->find("lm_head.weight"), nullptr);  // tied
  const TensorView* qw = q.source->find("model.layers.1.mlp.down_proj.qweight");
  ASSERT_NE(qw, nullptr);
  EXPECT_EQ(qw->dtype, DType::I32);
  EXPECT_EQ(qw->shape, (std::vector<int64_t>{128, 8}));
  const TensorView* sc = q.source->find("model.layers.1.mlp.down_proj.scales");
  ASSERT_NE(sc, nullptr);
  EXPECT_EQ(sc->dtype, DType::F16);
  EXPECT_EQ(sc->shape, (std::vector<int64_t>{4, 64}));
  ASSERT_NE(q.source->find("model.layers.0.self_attn.q_proj.bias"), nullptr);
  const nlohmann::json cfg = nlohmann::json::parse(read_text_file(out + "/config.json"));
  EXPECT_TRUE(cfg["quantization_config"]["modules_to_not_convert"].is_null());
  EXPECT_EQ(cfg["quantization_config"]["quant_method"], "awq");
  EXPECT_EQ(cfg["quantization_config"]["zero_point"], true);

  // The packed weights unpack to exactly what the final quantizer produces.
  {
    Checkpoint fp = open_checkpoint(in);
    const DecoderLayerF32 L = load_decoder_layer(fp, 1);
    const QuantizedMatrix want = quantize_fp16(L.down.w.data(), L.down.out, L.down.in, 32, 4);
    AwqTensors t;
    t.qweight = *qw;
    t.qzeros = *q.source->find("model.layers.1.mlp.down_proj.qzeros");
    t.scales = *sc;
    t.version = "gemm";
    t.group_size = 32;
    t.out = 64;
    t.in = 128;
    const QuantizedMatrix got = from_int4(decode_awq(t));
    EXPECT_EQ(got.q, want.q);
    EXPECT_EQ(got.zeros, want.zeros);
    EXPECT_EQ(got.scales, want.scales);
  }
  const std::vector<int32_t> ids = random_ids(20, 256, 7);
  const std::vector<float> a = logits_of(in, ids), b = logits_of(out, ids);
  // Random N(0, 0.08) weights are hard to quantize (the fixtures' own note: max |dlogit| 1.2 at
  // g128); this only checks that the model is the same model, not a broken one.
  std::printf("tiny-qwen2 RTN g32: max |dlogit| %.3f, rms/std %.3f\n", max_abs_diff(a, b),
              relative_rms(a, b));
  EXPECT_LT(relative_rms(a, b), 0.35f);
}

TEST(Quantize, WidthsNotDivisibleStayFp16) {
  const std::string in = fixture("tiny-mistral");  // hidden 64, intermediate 128
  if (!test::path_exists_for_test(in + "/model.safetensors")) GTEST_SKIP() << "no " << in;
  {  // g128: only down_proj (in 128) is quantized
    QuantizeOptions o;
    o.input = in;
    o.output = temp_dir("rtn-mistral-128");
    o.method = "rtn";
    o.progress = false;
    const QuantizeSummary s = quantize_model(o);
    EXPECT_EQ(s.n_linears_quantized, 2);
    EXPECT_EQ(s.not_converted.size(), 12u);
  }
  // The layers kept in fp16 are listed in modules_to_not_convert. (A group size that leaves no
  // layer to quantize is refused: Quantize.NothingToQuantizeIsAnError.)
  const std::string out = temp_dir("rtn-mistral");
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.method = "rtn";
  o.progress = false;
  const QuantizeSummary s = quantize_model(o);
  EXPECT_EQ(s.n_linears_quantized, 2);
  const nlohmann::json cfg = nlohmann::json::parse(read_text_file(out + "/config.json"));
  const auto& m = cfg["quantization_config"]["modules_to_not_convert"];
  ASSERT_TRUE(m.is_array());
  EXPECT_EQ(m.size(), 12u);
  EXPECT_EQ(m[0], "model.layers.0.self_attn.q_proj");
  const std::vector<int32_t> ids = random_ids(17, 256, 8);
  EXPECT_LT(relative_rms(logits_of(in, ids), logits_of(out, ids)), 0.35f);
  // Rerunning into a non-empty folder is refused.
  EXPECT_THROW(quantize_model(o), Error);
}

TEST(Quantize, AwqCheckpointFoldsScalesAndLoads) {
  const std::string in = fixture("tiny-qwen3");  // q/k norms, head_dim 32 x 4 heads != hidden
  if (!test::path_exists_for_test(in + "/model.safetensors")) GTEST_SKIP() << "no " << in;
  const std::string out = temp_dir("awq-qwen3");
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.method = "awq";
  o.group_size = 32;
  o.calib_tokens = random_ids(3 * 32, 256, 9);
  o.calib_tokens_seq_len = 32;
  o.progress = false;
  const QuantizeSummary s = quantize_model(o);
  EXPECT_EQ(s.calib_blocks, 3);
  ASSERT_EQ(s.layer_reports.size(), 2u);
  for (const AwqLayerReport& r : s.layer_reports) {
    EXPECT_GE(r.best_ratio[0], 0.0f);
    EXPECT_EQ(r.best_ratio[1], -1.0f);  // GQA
    EXPECT_GE(r.best_ratio[2], 0.0f);
    EXPECT_GE(r.best_ratio[3], 0.0f);
  }
  Checkpoint fp = open_checkpoint(in), q = open_checkpoint(out);
  // Norm weights carry the folded 1/s (FORMATS.md §1.6).
  const auto n0 = read_f32(require_tensor(fp, "model.layers.0.input_layernorm.weight"));
  const auto n1 = read_f32(require_tensor(q, "model.layers.0.input_layernorm.weight"));
  EXPECT_GT(max_abs_diff(n0, n1), 1e-2f);
  const std::vector<int32_t> ids = random_ids(20, 256, 10);
  const std::vector<float> a = logits_of(in, ids), b = logits_of(out, ids);
  std::printf("tiny-qwen3 AWQ g32: max |dlogit| %.3f, rms/std %.3f\n", max_abs_diff(a, b),
              relative_rms(a, b));
  EXPECT_LT(relative_rms(a, b), 0.35f);
}

TEST(Quantize, BadOptions) {
  QuantizeOptions o;
  o.input = fixture("tiny-qwen2");
  o.output = temp_dir("bad");
  o.method = "gptq";
  EXPECT_THROW(quantize_model(o), Error);
  o.method = "rtn";
  o.w_bit = 3;
  EXPECT_THROW(quantize_model(o), Error);
  o.w_bit = 4;
  o.group_size = 100;
  EXPECT_THROW(quantize_model(o), Error);
  o.group_size = 128;
  o.method = "awq";  // no calib.txt in the fixture folder, no tokenizer
  EXPECT_THROW(quantize_model(o), Error);
  o.method = "rtn";
  o.input = fixture("tiny-awq-gemm");  // already quantized
  EXPECT_THROW(quantize_model(o), Error);
}

TEST(CheckpointWriter, ShardsAndIndex) {
  const std::string dir = temp_dir("shards");
  fs::create_directories(dir);
  ShardedWriter w(dir, 100);  // every tensor >= 100 bytes: one shard each
  const std::vector<float> a(40, 1.5f);
  const std::vector<int32_t> b(30, -7);
  w.add(f16_tensor("a.weight", a.data(), {4, 10}));
  w.add(i32_tensor("b.qweight", b, {3, 10}));
  w.add(f16_tensor("c.weight", a.data(), {40}));
  w.finish();
  ASSERT_EQ(w.files().size(), 2u);
  EXPECT_EQ(w.files()[0], "model-00001-of-00002.safetensors");
  auto folder = SafetensorsFolder::open(dir);
  ASSERT_NE(folder->find("a.weight"), nullptr);
  ASSERT_NE(folder->find("b.qweight"), nullptr);
  ASSERT_NE(folder->find("c.weight"), nullptr);
  EXPECT_EQ(read_f32(*folder->find("c.weight"))[3], 1.5f);
  const nlohmann::json idx =
      nlohmann::json::parse(read_text_file(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(idx["metadata"]["total_size"], 80 + 120 + 80);
  EXPECT_EQ(idx["weight_map"]["b.qweight"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(idx["weight_map"]["c.weight"], "model-00002-of-00002.safetensors");

  const std::string one = temp_dir("single");
  fs::create_directories(one);
  ShardedWriter w1(one, 1 << 20);
  w1.add(f16_tensor("x", a.data(), {40}));
  w1.finish();
  EXPECT_EQ(w1.files(), (std::vector<std::string>{"model.safetensors"}));
  EXPECT_FALSE(test::path_exists_for_test(one + "/model.safetensors.index.json"));
}

TEST(CheckpointWriter, ConfigJson) {
  AwqConfigJson q;
  q.modules_to_not_convert = {"model.layers.0.mlp.down_proj"};
  const nlohmann::json j = nlohmann::json::parse(awq_config_json(
      R"({"model_type": "llama", "torch_dtype": "bfloat16", "dtype": "bfloat16"})", q));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["torch_dtype"], "float16");
  EXPECT_EQ(j["dtype"], "float16");
  EXPECT_EQ(j["quantization_config"]["bits"], 4);
  EXPECT_EQ(j["quantization_config"]["group_size"], 128);
  EXPECT_EQ(j["quantization_config"]["version"], "gemm");
  EXPECT_EQ(j["quantization_config"]["modules_to_not_convert"][0], "model.layers.0.mlp.down_proj");
  EXPECT_THROW(awq_config_json("[1, 2]", q), Error);
}

TEST(Calibration, BlocksFromText) {
  const std::string dir = test::source_dir() + "/models/default";
  if (!test::path_exists_for_test(dir + "/tokenizer.json")) GTEST_SKIP() << "no default model";
  auto tok = Tokenizer::from_hf_dir(dir);
  std::string text = "  In the beginning God created the heaven and the earth.  \n\n";
  for (int i = 0; i < 40; ++i) text += "And God said, Let there be light: and there was light.\n";
  text += std::string(3000, 'x') + "\n";  // longer than seq_len tokens: skipped
  const CalibBlocks cb = make_calib_blocks(text, *tok, 30, 64);
  EXPECT_EQ(cb.n_samples, 30);
  const auto first = tok->encode("In the beginning God created the heaven and the earth.", true);
  ASSERT_GT(first.size(), 2u);
  EXPECT_EQ(first[0], tok->bos_id());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), cb.tokens.begin()));  // stripped, with BOS
  const auto line = tok->encode("And God said, Let there be light: and there was light.", true);
  const size_t total = first.size() + 29 * line.size();
  EXPECT_EQ(cb.n_blocks, static_cast<int>(total / 64));
  EXPECT_EQ(cb.tokens.size(), static_cast<size_t>(cb.n_blocks) * 64);
  EXPECT_EQ(cb.n_dropped, static_cast<int64_t>(total % 64));
  const CalibBlocks all = make_calib_blocks(text, *tok, 1000, 64);
  EXPECT_EQ(all.n_samples, 41);
  EXPECT_EQ(all.n_skipped_long, 1);
  EXPECT_THROW(make_calib_blocks("short\n", *tok, 10, 64), Error);
  EXPECT_THROW(make_calib_blocks(text, *tok, 0, 64), Error);
}

// A GGUF input (llama arch: q/k rows permuted for interleaved RoPE, FORMATS.md §4.3) quantizes to
// the same AutoAWQ tensors as the HF checkpoint of the same weights.
TEST(Quantize, GgufInputMatchesHfInput) {
  const std::string gguf = test::shared_path("models/stories260K/stories260K.gguf");
  const std::string hf = test::shared_path("models/stories260K-hf");
  if (!test::path_exists_for_test(gguf) || !test::path_exists_for_test(hf + "/config.json"))
    GTEST_SKIP() << "shared stories260K missing";
  QuantizeOptions o;
  o.method = "rtn";
  o.group_size = 32;  // hidden 64: q/k/v/o quantized; gate/up (out 172) and down (in 172) kept
  o.progress = false;
  o.input = gguf;
  o.output = temp_dir("rtn-stories-gguf");
  const QuantizeSummary a = quantize_model(o);
  o.input = hf;
  o.output = temp_dir("rtn-stories-hf");
  const QuantizeSummary b = quantize_model(o);
  EXPECT_EQ(a.n_linears_quantized, 20);
  EXPECT_EQ(a.not_converted, b.not_converted);
  const std::string out_gguf = std::string(PERFX_BINARY_DIR) + "/test_tmp/quant/rtn-stories-gguf";
  Checkpoint ca = open_checkpoint(out_gguf);
  Checkpoint cb = open_checkpoint(o.output);
  EXPECT_EQ(ca.config.hidden_size, cb.config.hidden_size);
  for (const std::string& name : cb.source->names()) {
    const TensorView* x = ca.source->find(name);
    const TensorView* y = cb.source->find(name);
    ASSERT_NE(x, nullptr) << name;
    ASSERT_EQ(x->shape, y->shape) << name;
    ASSERT_EQ(x->dtype, y->dtype) << name;
    EXPECT_EQ(std::memcmp(x->data, y->data, x->nbytes), 0) << name;
  }
  const std::vector<int32_t> ids = random_ids(20, 512, 11);
  EXPECT_LT(max_abs_diff(logits_of(o.output, ids), logits_of(out_gguf, ids)), 1e-4f);
}

// Issue 8: the GGUF's tokenizer is kept (tokenizer.gguf), so the quantized folder runs; it
// tokenizes exactly as the GGUF does.
TEST(Quantize, GgufInputKeepsItsTokenizer) {
  const std::string gguf = test::shared_path("models/stories260K/stories260K.gguf");
  if (!test::path_exists_for_test(gguf)) GTEST_SKIP() << "shared stories260K.gguf missing";
  QuantizeOptions o;
  o.method = "rtn";
  o.group_size = 32;
  o.progress = false;
  o.input = gguf;
  o.output = temp_dir("rtn-stories-gguf-tok");
  const QuantizeSummary s = quantize_model(o);
  EXPECT_NE(std::find(s.files.begin(), s.files.end(), "tokenizer.gguf"), s.files.end());
  auto from_folder = Tokenizer::from_hf_dir(o.output);
  auto from_gguf = Tokenizer::from_gguf(*gguf::File::open(gguf));
  for (const char* text : {"Once upon a time, there was", "  two spaces\n", "\xE4\xBD\xA0 <s>x"})
    EXPECT_EQ(from_folder->encode(text, true), from_gguf->encode(text, true)) << text;
  EXPECT_EQ(from_folder->eos_ids(), from_gguf->eos_ids());
  EXPECT_EQ(from_folder->add_bos_by_default(), from_gguf->add_bos_by_default());
  EngineOptions eo;
  eo.model_path = o.output;
  eo.n_threads = 2;
  auto e = Engine::load(eo);
  Engine::GenerateOptions go;
  go.max_tokens = 4;
  go.sampling.temperature = 0;
  EXPECT_FALSE(e->generate(encode_prompt(e->tokenizer(), "Once upon a time"), go, nullptr)
                   .text.empty());
}

// Issue 8: a quantization that would quantize no linear layer at all is refused before anything is
// written (it used to write an fp16 copy labelled AWQ).
TEST(Quantize, NothingToQuantizeIsAnError) {
  QuantizeOptions o;
  o.input = fixture("tiny-qwen2");  // hidden 64, intermediate 128: every width below 256
  o.output = temp_dir("nothing");
  o.method = "rtn";
  o.group_size = 256;
  o.progress = false;
  try {
    quantize_model(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no linear layer of this model can be quantized with "
                                         "--group-size 256"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(o.output));
  o.group_size = 128;  // the down projection (in 128) is quantized
  EXPECT_EQ(quantize_model(o).n_linears_quantized, 2);
}

// Issue 8: an AutoAWQ checkpoint ("modules_to_not_convert": null = nothing excluded) with one
// projection stored as a plain fp16 .weight loaded silently; it names the missing qweight now.
TEST(AwqLoad, PlainWeightWhereTheQweightBelongsIsAnError) {
  const std::string src = fixture("tiny-awq-gemm");
  const std::string dir = temp_dir("awq-plain-weight");
  fs::create_directories(dir);
  fs::copy_file(src + "/config.json", dir + "/config.json");
  auto st = SafetensorsFile::open(src + "/model.safetensors");
  const std::string base = "model.layers.0.self_attn.q_proj";
  const TensorView* qw = st->find(base + ".qweight");
  ASSERT_NE(qw, nullptr);
  const int64_t in = qw->shape[0], out = qw->shape[1] * 8;
  std::vector<TensorView> views;
  for (const std::string& n : st->names())
    if (n.rfind(base + ".q", 0) != 0 && n != base + ".scales") views.push_back(*st->find(n));
  std::vector<uint16_t> w(static_cast<size_t>(out * in), 0x3c00);  // fp16 1.0
  TensorView plain;
  plain.name = base + ".weight";
  plain.dtype = DType::F16;
  plain.shape = {out, in};
  plain.data = w.data();
  plain.nbytes = w.size() * 2;
  views.push_back(plain);
  write_safetensors(dir + "/model.safetensors", views);
  Checkpoint ck = open_checkpoint(dir);
  ASSERT_TRUE(ck.config.quant.enabled);
  auto be = create_backend("cpu", 1);
  try {
    LlamaModel model(ck, *be);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor '" + base + ".qweight'"),
              std::string::npos)
        << e.what();
  }
}
