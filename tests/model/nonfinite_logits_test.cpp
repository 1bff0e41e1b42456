// A model whose logits turn NaN mid-generation (corrupt weights, an activation overflow) stops with
// an error that says so, on every backend and on each sampling path the engine takes: plain steps
// and overlapped ones (step_begin / step_end, whose next step is fed the broken row's id on the
// device), greedy and drawn with a temperature. On CUDA the greedy decode steps run as graphs with
// the argmax inside them (captured, then replayed): that argmax skipped NaN and picked a token
// silently, and so did the OpenCL argmax, where the CPU already raised the error.
//
// The model: stories260K-hf with its lm_head untied (a copy of the embedding) and the embedding row
// of one token id set to NaN, so the logits are finite until that token is fed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/model_test_util.h"
#include "perfx/engine.h"
#include "perfx/status.h"
#include "support/test_support.h"
#include "unit/formats/formats_test_util.h"

namespace perfx::test {
namespace {

constexpr int32_t kBadToken = 300;

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// stories260K-hf copied into `dir` with lm_head.weight untied and embedding row kBadToken NaN.
void write_broken_model(const TempDir& dir) {
  const std::string src = shared_path("models/stories260K-hf");
  const std::string st = read_all(src + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, st.data(), 8);
  nlohmann::json h = nlohmann::json::parse(st.substr(8, n));
  std::string data = st.substr(8 + n);
  const auto& emb = h["model.embed_tokens.weight"];
  ASSERT_EQ(emb["dtype"], "F32");
  const int64_t cols = emb["shape"][1];
  const size_t e0 = emb["data_offsets"][0], e1 = emb["data_offsets"][1];
  const std::string lm_head = data.substr(e0, e1 - e0);  // the untied copy stays finite
  h["lm_head.weight"] = {{"dtype", "F32"},
                         {"shape", emb["shape"]},
                         {"data_offsets", {data.size(), data.size() + lm_head.size()}}};
  data += lm_head;
  const float nan = std::nanf("");
  for (int64_t c = 0; c < cols; ++c)
    std::memcpy(&data[e0 + ((size_t)kBadToken * (size_t)cols + (size_t)c) * 4], &nan, 4);
  write_bytes(dir.file("model.safetensors"), safetensors_bytes(h.dump(), data));
  nlohmann::json cfg = nlohmann::json::parse(read_all(src + "/config.json"));
  cfg["tie_word_embeddings"] = false;
  write_text(dir.file("config.json"), cfg.dump(2));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    write_bytes(dir.file(f), read_all(src + "/" + f));
}

class NonFiniteLogits : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
    std::string why;
    if (!device_available(GetParam(), &why))
      GTEST_SKIP() << "device " << GetParam() << " unavailable here: " << why;
    ASSERT_NO_FATAL_FAILURE(write_broken_model(dir_));
  }
  std::unique_ptr<Engine> load() {
    EngineOptions eo;
    eo.model_path = dir_.path();
    eo.n_threads = 2;
    eo.device = GetParam();
    eo.kv_cache_tokens = 1024;
    return Engine::load(eo);
  }
  TempDir dir_;
};

SamplingParams params(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = 3;
  return p;
}

void expect_not_finite(const std::string& what, const std::function<void()>& f) {
  const std::string e = error_of(f);  // fails the test when nothing is thrown
  EXPECT_NE(e.find("logits are not finite"), std::string::npos) << what << ": " << e;
}

TEST_P(NonFiniteLogits, PlainStepsStopWithAnError) {
  for (float temp : {0.0f, 1.1f}) {
    SCOPED_TRACE("temperature " + std::to_string(temp));
    auto e = load();
    PromptedSequences b = start_sequences(*e, {{1, 403, 407}}, params(temp));
    Engine::StepResult r;
    for (int s = 0; s < 6; ++s) {  // the prompt, then decode steps (graphs captured, replayed)
      e->step(b.items, r);
      ASSERT_GE(r.tokens[0], 0);
      ASSERT_NE(r.tokens[0], kBadToken) << "the model picked the broken token itself";
      b.samplers[0].accept(r.tokens[0]);
      b.items[0].tokens = {r.tokens[0]};
    }
    b.items[0].tokens = {kBadToken};
    expect_not_finite("the step fed the broken token", [&] { e->step(b.items, r); });
  }
}

TEST_P(NonFiniteLogits, OverlappedStepsStopWithAnError) {
  for (float temp : {0.0f, 1.1f}) {
    SCOPED_TRACE("temperature " + std::to_string(temp));
    auto e = load();
    PromptedSequences b = start_sequences(*e, {{1, 403, 407}}, params(temp));
    Engine::StepResult r;
    e->step_begin(b.items);
    b.items[0].tokens.clear();
    b.items[0].token_from_sample = true;
    for (int s = 0; s < 5; ++s) {  // each step fed the previous one's sample on the device
      e->step_begin(b.items);
      e->step_end(r);
      ASSERT_GE(r.tokens[0], 0);
      ASSERT_NE(r.tokens[0], kBadToken) << "the model picked the broken token itself";
    }
    e->step_end(r);
    // The broken token from the host; the step after it fed its (broken) sample on the device.
    b.items[0].tokens = {kBadToken};
    b.items[0].token_from_sample = false;
    expect_not_finite("the steps after the broken token", [&] {
      e->step_begin(b.items);
      b.items[0].tokens.clear();
      b.items[0].token_from_sample = true;
      e->step_begin(b.items);
      e->step_end(r);
      e->step_end(r);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, NonFiniteLogits, ::testing::ValuesIn(all_test_devices()),
                         DeviceParamName());

}  // namespace
}  // namespace perfx::test
