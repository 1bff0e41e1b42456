// perfx run / tokenize end to end: the bundled default model, parity dumps, and bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "e2e/cli_util.h"
#include "formats/safetensors.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

const std::string kDefault = std::string(PERFX_SOURCE_DIR) + "/models/default";

TEST(CliRun, DefaultModelPrintsEnglish) {
  auto r = run_perfx("run -p 'And God said' -n 24 --temp 0 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(' '), std::string::npos);
  int letters = 0;
  for (char c : r.out) letters += std::isalpha((unsigned char)c) != 0;
  EXPECT_GT(letters, 40) << r.out;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("peak resident memory"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("perfx:"), std::string::npos) << "diagnostics must go to stderr";
}

TEST(CliRun, GreedyIsDeterministicAndSeedsMatter) {
  auto a = run_perfx("run -p 'In the beginning' -n 16 --temp 0 -t 2");
  auto b = run_perfx("run -p 'In the beginning' -n 16 --temp 0 -t 1");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  auto s1 = run_perfx("run -p 'In the beginning' -n 24 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 -s 7");
  auto s2 = run_perfx("run -p 'In the beginning' -n 24 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 -s 7");
  auto s3 = run_perfx("run -p 'In the beginning' -n 24 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 -s 8");
  EXPECT_EQ(s1.out, s2.out);
  EXPECT_NE(s1.out, s3.out);
}

TEST(CliRun, EmptyPromptStartsFromBos) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/golden_greedy_n256.txt");
  auto r = run_perfx("run -m " + shared_path("models/stories260K-hf") + " -p '' -n 256 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, read_file(shared_path("models/stories260K-hf/golden_greedy_n256.txt")));
}

TEST(CliRun, DumpLogitsMatchesTransformers) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/reference_logits.safetensors");
  // The reference's input ids decode to this prompt (BOS + "Once upon a time, there was a little girl")
  const std::string dir = make_temp_dir("dump");
  auto r = run_perfx("run -m " + shared_path("models/stories260K-hf") +
                     " -p 'Once upon a time, there was a little' -n 0 --dump-logits " + dir + "/l.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto got = SafetensorsFile::open(dir + "/l.safetensors");
  auto ref = SafetensorsFile::open(shared_path("models/stories260K-hf/reference_logits.safetensors"));
  const TensorView* gi = got->find("input_ids");
  const TensorView* gl = got->find("logits");
  const TensorView* rl = ref->find("logits");
  ASSERT_TRUE(gi && gl && rl);
  EXPECT_EQ(gi->dtype, DType::I32);
  EXPECT_EQ(gl->dtype, DType::F32);
  ASSERT_EQ(gl->shape.size(), 2u);
  const int64_t T = gl->shape[0], V = gl->shape[1];
  ASSERT_EQ(V, 512);
  ASSERT_LE(T, rl->shape[0]);
  const int32_t* ids = static_cast<const int32_t*>(gi->data);
  const int32_t* rids = static_cast<const int32_t*>(ref->find("input_ids")->data);
  for (int64_t t = 0; t < T; ++t) ASSERT_EQ(ids[t], rids[t]) << t;
  const float* a = static_cast<const float*>(gl->data);
  const float* b = static_cast<const float*>(rl->data);
  float m = 0;
  for (int64_t i = 0; i < T * V; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  EXPECT_LE(m, 1e-3f);
  std::system(("rm -rf " + dir).c_str());
}

TEST(CliTokenize, DefaultModelIds) {
  auto r = run_perfx("tokenize -p 'In the beginning'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0 1145 260 1998\n");  // from models/default/reference_greedy.json (HF tokenizer)
}

// ---- bad input: one clear line, non-zero exit, no crash
void expect_error(const std::string& args, const std::string& needle) {
  auto r = run_perfx(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << r.err;
}

std::string copy_default(const std::string& tag) {
  const std::string dir = make_temp_dir(tag);
  std::system(("cp " + kDefault + "/*.json " + dir + "/").c_str());
  return dir;
}

TEST(CliErrors, MissingModel) { expect_error("run -m /nonexistent/model -p hi", "does not exist"); }

TEST(CliErrors, NotAModel) {
  const std::string dir = make_temp_dir("notmodel");
  write_file(dir + "/x.gguf", "this is not a gguf file at all");
  expect_error("run -m " + dir + "/x.gguf -p hi", "magic");
  expect_error("run -m " + dir + " -p hi", "config.json");
}

TEST(CliErrors, TruncatedSafetensors) {
  const std::string dir = copy_default("trunc");
  const std::string st = read_file(kDefault + "/model.safetensors");
  write_file(dir + "/model.safetensors", st.substr(0, st.size() / 2));
  expect_error("run -m " + dir + " -p hi", "model.safetensors");
}

TEST(CliErrors, UnknownModelType) {
  const std::string dir = copy_default("mtype");
  std::string cfg = read_file(dir + "/config.json");
  cfg.replace(cfg.find("\"llama\""), 7, "\"gpt_neox\"");
  write_file(dir + "/config.json", cfg);
  std::system(("ln -s " + kDefault + "/model.safetensors " + dir + "/model.safetensors").c_str());
  expect_error("run -m " + dir + " -p hi", "gpt_neox");
}

TEST(CliErrors, ShapeMismatch) {
  const std::string dir = copy_default("shape");
  std::string cfg = read_file(dir + "/config.json");
  cfg.replace(cfg.find("\"intermediate_size\": 768"), 24, "\"intermediate_size\": 640");
  write_file(dir + "/config.json", cfg);
  std::system(("ln -s " + kDefault + "/model.safetensors " + dir + "/model.safetensors").c_str());
  expect_error("run -m " + dir + " -p hi", "shape");
}

TEST(CliErrors, MissingTensor) {
  const std::string dir = copy_default("missing");
  std::string cfg = read_file(dir + "/config.json");
  cfg.replace(cfg.find("\"num_hidden_layers\": 8"), 22, "\"num_hidden_layers\": 9");
  write_file(dir + "/config.json", cfg);
  std::system(("ln -s " + kDefault + "/model.safetensors " + dir + "/model.safetensors").c_str());
  expect_error("run -m " + dir + " -p hi", "missing tensor 'model.layers.8.");
}

TEST(CliErrors, AbsurdFlags) {
  expect_error("run -p hi -n -5", "-n");
  expect_error("run -p hi --temp -1", "--temp");
  expect_error("run -p hi -c 999999999", "context size");
  expect_error("run -p hi -t 100000", "thread");
  expect_error("run -p hi --device tpu", "unknown device");
  expect_error("run -p hi --top-p 0", "--top-p");
  expect_error("run -p hi -n notanumber", "notanumber");
  expect_error("run -p hi --temperature 0.5", "--temperature");
  expect_error("tokenize", "--prompt");
  auto p = run_perfx("run -p 'In the beginning God created the heaven and the earth' -c 4");
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_NE(p.err.find("context size"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace perfx::test
