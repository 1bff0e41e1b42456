// perfx run / tokenize end to end: the bundled default model, parity dumps, and bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "core/thread_pool.h"
#include "e2e/cli_util.h"
#include "formats/safetensors.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

const std::string kDefault = std::string(PERFX_SOURCE_DIR) + "/models/default";

// make_temp_dir's folders go when the process that made them exits: this test binary, run again
// as a child with PERFX_TEMP_DIR_PROBE set, makes one and prints its path; after the child exits
// the folder must be gone (before, every e2e run left its folders, model copies too, in /tmp).
TEST(TestSupport, TempDirsAreRemovedAtExit) {
  if (const char* probe = std::getenv("PERFX_TEMP_DIR_PROBE"); probe && *probe) {
    const std::string d = make_temp_dir("probe");
    write_file(d + "/file", "x");
    std::printf("probe-dir %s\n", d.c_str());
    return;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "PERFX_TEMP_DIR_PROBE=1 " + sh_quote(self) +
                          " --gtest_filter=TestSupport.TempDirsAreRemovedAtExit";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ASSERT_EQ(pclose(p), 0) << out;
  const size_t at = out.find("probe-dir ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string dir = out.substr(at + 10, out.find('\n', at) - at - 10);
  ASSERT_EQ(dir.rfind("/tmp/perfx-probe-", 0), 0u) << dir;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " is left behind";
}

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

// Issue 8: a continuation keeps its leading space on SentencePiece vocabularies (" there", not
// "there"), so a stop string starting with a space fires right after the prompt.
TEST(CliRun, ContinuationKeepsItsLeadingSpace) {
  PERFX_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  for (const std::string& m : {shared_path("models/stories260K-hf"),
                               shared_path("models/stories260K/stories260K.gguf")}) {
    auto r = run_perfx("run -m " + m + " -p 'Once upon a time,' -n 8 --temp 0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, " there was a little girl named\n") << m;
  }
  auto s = run_perfx("run -m " + shared_path("models/stories260K-hf") +
                     " -p 'Once upon a' -n 8 --temp 0 --stop ' time'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out, "\n");
  EXPECT_NE(s.err.find("generated 1 tokens"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("finish: stop"), std::string::npos) << s.err;
}

// Issue 8: presence / frequency penalties cover generated tokens only (OpenAI), the repetition
// penalty the prompt too (llama.cpp). The greedy " there" is in the prompt.
TEST(CliRun, PenaltiesCoverWhatTheyMeanElsewhere) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  const std::string base = "run -m " + shared_path("models/stories260K-hf") +
                           " -p 'Once upon a time, there was a girl. Once upon a time,' -n 2 "
                           "--temp 0";
  auto plain = run_perfx(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.rfind(" there", 0), 0u) << plain.out;
  // 10: large enough that counting the prompt's " there" would change the pick (it did).
  EXPECT_EQ(run_perfx(base + " --frequency-penalty 10").out, plain.out);
  EXPECT_EQ(run_perfx(base + " --presence-penalty 10").out, plain.out);
  EXPECT_NE(run_perfx(base + " --repeat-penalty 3").out, plain.out);
}

// "prompt P tokens ... generated G tokens" from run's stats line; -1 when absent.
std::pair<int, int> prompt_and_generated(const std::string& err) {
  const size_t p = err.find("perfx: prompt "), g = err.find("; generated ");
  if (p == std::string::npos || g == std::string::npos) return {-1, -1};
  return {std::atoi(err.c_str() + p + 14), std::atoi(err.c_str() + g + 12)};
}

TEST(CliRun, ContextPastTheTrainedOneWarnsAndMinusOneStillEnds) {
  // models/default was trained with max_position_embeddings 512.
  auto d = run_perfx("run -p 'In the beginning' -n 4 -t 2");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.err.find("warning"), std::string::npos) << d.err;
  // The fresh-user run: -n -1 --ignore-eos with a huge context filled it for hours; now -n -1 stops
  // at the trained context and says so.
  auto r = run_perfx("run -c 100000 -n -1 --ignore-eos -p hi -t 2", 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("perfx: warning: context 100000 exceeds the model's trained context 512; "
                       "output past 512 tokens may degrade; -n -1 stops there"),
            std::string::npos)
      << r.err;
  auto [p, g] = prompt_and_generated(r.err);
  EXPECT_EQ(p + g, 512) << r.err;
  EXPECT_NE(r.err.find("finish: length"), std::string::npos) << r.err;
  // An explicit -n goes past it, up to the context.
  auto e = run_perfx("run -c 600 -n 2000 --ignore-eos -p hi -t 2", 300);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.err.find("perfx: warning: context 600 exceeds the model's trained context 512"),
            std::string::npos)
      << e.err;
  EXPECT_EQ(e.err.find("-n -1"), std::string::npos) << e.err;
  std::tie(p, g) = prompt_and_generated(e.err);
  EXPECT_EQ(p + g, 600) << e.err;
}

// A generation that the context size ended, before -n tokens, ended without a word (only
// "finish: length", as when -n ends it): now one note line, as llama.cpp says "context full".
// Not when -n, a stop string or (with -n -1 past the trained context) the announced cap ends it.
TEST(CliRun, StopAtTheContextSizeIsNoted) {
  const std::string base = "run -p 'In the beginning' --temp 0 --ignore-eos -t 2 -c 16";
  auto r = run_perfx(base + " -n 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto [p, g] = prompt_and_generated(r.err);
  ASSERT_EQ(p + g, 16) << r.err;
  EXPECT_NE(r.err.find("perfx: note: generation stopped at the context size (16 tokens) after " +
                       std::to_string(g) + " tokens, short of -n 64; give a larger -c for more\n"),
            std::string::npos)
      << r.err;
  // one token: "after 1 token", not "1 tokens"
  auto one = run_perfx("run -p 'In the beginning' --temp 0 --ignore-eos -t 2 -c " +
                       std::to_string(p + 1) + " -n 64");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(
      one.err.find("perfx: note: generation stopped at the context size (" + std::to_string(p + 1) +
                   " tokens) after 1 token, short of -n 64; give a larger -c for more\n"),
      std::string::npos)
      << one.err;
  auto all = run_perfx(base + " -n -1");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.err.find("perfx: note: generation stopped at the context size (16 tokens) after " +
                         std::to_string(g) + " tokens; give a larger -c for more\n"),
            std::string::npos)
      << all.err;
  for (const std::string& args :
       {base + " -n 4", base + " -n " + std::to_string(g), base + " -n 64 --stop ' '"}) {
    auto q = run_perfx(args);
    ASSERT_EQ(q.exit_code, 0) << args << "\n" << q.err;
    EXPECT_EQ(q.err.find("note"), std::string::npos) << args << "\n" << q.err;
  }
  auto cap = run_perfx("run -p hi -c 600 -n -1 --ignore-eos --temp 0 -t 2", 300);
  ASSERT_EQ(cap.exit_code, 0) << cap.err;
  std::tie(p, g) = prompt_and_generated(cap.err);
  EXPECT_NE(
      cap.err.find("perfx: note: generation stopped at the model's trained context (512 "
                   "tokens) after " +
                   std::to_string(g) + " tokens, as -n -1 does; give -n N to generate past it"),
      std::string::npos)
      << cap.err;
  EXPECT_EQ(cap.err.find("at the context size"), std::string::npos) << cap.err;
}

TEST(CliRun, ThreadsAboveTheCpusWarnButRun) {
  const int hw = available_cpus();
  if (hw >= 1024) GTEST_SKIP() << "more than 1024 CPUs";
  auto r = run_perfx("run -p 'In the beginning' -n 2 -t " + std::to_string(hw + 1));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("perfx: warning: -t " + std::to_string(hw + 1) + " is more than the " +
                       std::to_string(hw) + " CPUs this process may use"),
            std::string::npos)
      << r.err;
  auto ok = run_perfx("run -p 'In the beginning' -n 2 -t " + std::to_string(hw));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;
}

// Fresh-user run: -c 0 ("the model's context" in run and serve) was an error in perplexity.
TEST(CliPerplexity, ContextZeroIsTheModelsContext) {
  auto r = run_perfx("perplexity -f " + kDefault + "/heldout.txt -c 0 --chunks 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ctx 512,"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.rfind("PPL = ", 0), 0u) << r.out;
}

// Fresh-user run: a text shorter than 2 x ctx printed a header counting its "1 windows", then an
// error that the text is too short; now only the error, saying what to change.
TEST(CliPerplexity, ShortTextIsOneErrorLine) {
  const std::string dir = make_temp_dir("pplshort");
  write_file(dir + "/t.txt", "In the beginning God created the heaven and the earth.\n");
  auto r = run_perfx("perplexity -f " + dir + "/t.txt -c 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("windows"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("perplexity with -c 8 needs at least 2 x 8 = 16 (give a longer text or a "
                       "smaller -c)\n"),
            std::string::npos)
      << r.err;
  std::system(("rm -rf " + dir).c_str());
}

// Fresh-user run (thirty-fifth session): an empty file was "the text has 1 token" (its BOS).
TEST(CliPerplexity, EmptyTextSaysSo) {
  const std::string dir = make_temp_dir("pplempty");
  write_file(dir + "/e.txt", "\n \n");
  auto r = run_perfx("perplexity -f " + dir + "/e.txt -c 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "perfx: error: -f '" + dir +
                       "/e.txt' has no text to score (it is empty or only whitespace)\n");
  std::system(("rm -rf " + dir).c_str());
}

// `perfx bench -o json` speaks llama-bench's fields, one object per test; n_threads is the count
// the run used (a fresh user saw 0 for the default -t 0).
TEST(CliBench, JsonHasLlamaBenchFieldsAndTheThreadsUsed) {
  auto r = run_perfx("bench -p 16 -n 4 -r 1 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // the weight bytes and peak memory line goes to stderr with -o json too (a fresh user missed it)
  EXPECT_NE(r.err.find("perfx: weight bytes "), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array()) << r.out;
  ASSERT_EQ(j.size(), 2u) << r.out;
  EXPECT_EQ(j[0]["n_prompt"], 16);
  EXPECT_EQ(j[0]["n_gen"], 0);
  EXPECT_EQ(j[1]["n_prompt"], 0);
  EXPECT_EQ(j[1]["n_gen"], 4);
  for (const auto& t : j) {
    EXPECT_GT(t["avg_ts"].get<double>(), 0.0) << t;
    EXPECT_EQ(t["n_threads"], perfx::available_cpus()) << t;
  }
  auto two = run_perfx("bench -p 0 -n 2 -r 1 -t 1 -o json");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(nlohmann::json::parse(two.out)[0]["n_threads"], 1) << two.out;
  EXPECT_EQ(nlohmann::json::parse(two.out)[0]["lm_head_type"], "as stored") << two.out;
  auto q4 = run_perfx("bench -p 0 -n 2 -r 1 -t 1 -o json --lm-head-type q4_0");
  ASSERT_EQ(q4.exit_code, 0) << q4.err;
  EXPECT_EQ(nlohmann::json::parse(q4.out)[0]["lm_head_type"], "q4_0") << q4.out;
}

// bench's weight bytes and peak memory came after the table on stdout; now stdout is the table
// alone (as -o json is the JSON alone) and the line goes to stderr, as run's.
TEST(CliBench, StdoutIsTheTableAlone) {
  auto r = run_perfx("bench -p 8 -n 2 -r 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream out(r.out);
  std::string row;
  int rows = 0;
  while (std::getline(out, row)) {
    EXPECT_EQ(row.rfind("| ", 0), 0u) << "not a table row: '" << row << "'\n" << r.out;
    ++rows;
  }
  EXPECT_EQ(rows, 4) << r.out;  // header, separator, pp8, tg2
  // the model as run names it, not a path (the path stays in -o json's model_filename)
  std::istringstream table(r.out);
  std::getline(table, row);
  std::getline(table, row);
  ASSERT_TRUE(std::getline(table, row)) << r.out;
  const std::string model = row.substr(2, row.find(" |", 2) - 2);
  EXPECT_FALSE(model.empty()) << row;
  EXPECT_EQ(model.find('/'), std::string::npos) << row;
  // params as llama-bench prints them: models/default's 7,340,032 are "7.34 M", not "0.01 B" (a
  // fresh user's report)
  EXPECT_NE(row.find("| 7.34 M |"), std::string::npos) << row;
  EXPECT_NE(r.err.find("perfx: weight bytes "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; peak resident memory "), std::string::npos) << r.err;
}

// On CUDA the decode graphs are captured per block-table width, which doubles as the context
// grows (16-token blocks: 1, 2, 4 ... blocks). bench's tg warm-up ran 16 tokens, so a tg40 test
// (42 tokens: 3 blocks, width 4) captured its width-4 graph inside the first timed repetition and
// counted the capture as decode time. Now the warm-up runs the test's length where graphs are
// captured (also when an earlier test of the run captured the short warm-up's graphs: tg16
// first; and for tg16 itself, whose first step's graph, captured while the L2 warming plan was
// learned, went stale), and a capture left inside the timed runs is noted on stderr. (CUDA
// devices of PERFX_TEST_DEVICE; skipped where none is named or available.)
TEST(CliBench, NoGraphCaptureInsideTheTimedRepetitions) {
  int ran = 0;
  for (const std::string& dev : perfx::test::env_test_devices()) {
    std::string why;
    if (dev.rfind("cuda", 0) != 0 || !perfx::test::device_available(dev, &why)) continue;
    auto r = run_perfx("bench -p 0 -n 16,40 -r 2 --device " + dev);
    ASSERT_EQ(r.exit_code, 0) << dev << ": " << r.err;
    EXPECT_NE(r.out.find("tg16"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tg40"), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find("inside its timed repetitions"), std::string::npos)
        << dev << ": " << r.err;
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no CUDA device in PERFX_TEST_DEVICE (e.g. cuda:0) is available";
}

// `bench -p 0 -n 0` printed the table's header and no row; now an error before the model loads.
TEST(CliBench, NothingToMeasureIsAnError) {
  const std::string line =
      "perfx: error: nothing to measure: -p and -n are both 0 (give -p N for a prompt-processing "
      "test or -n N for a generation test)\n";
  for (const char* args : {"bench -p 0 -n 0", "bench -p 0,0 -n 0 -r 1"}) {
    auto r = run_perfx(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, line) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

// bench sizes its context to its longest test (pp and tg run apart, as llama-bench's, so -p and -n
// never add up). Past the model's trained context (512 for models/default) a test ran without a
// word: now it runs with one note line. Past 4 times it the error said only "the tests need a
// context of 3001 tokens, far beyond the model's": now it names the flag, the context and the most.
TEST(CliBench, PastTheTrainedContextNotesItAndFarPastItNamesTheFlag) {
  auto ok = run_perfx("bench -p 16 -n 4 -r 1 -t 2");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("note"), std::string::npos) << ok.err;
  // pp512 on a 512-token model (bench's default test): its prompt fills the trained context
  // exactly; the slot its sampled id holds is never run, so no note (a fresh user's first bench
  // printed one).
  auto full = run_perfx("bench -p 512 -n 4 -r 1 -t 2");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_EQ(full.err.find("note"), std::string::npos) << full.err;
  auto past = run_perfx("bench -p 600 -n 4 -r 1 -t 2");
  ASSERT_EQ(past.exit_code, 0) << past.err;
  EXPECT_NE(past.err.find("perfx: note: pp600 runs past the model's trained context of 512 tokens "
                          "(bench sizes the context to the longest test: 601 tokens); timed as "
                          "usual"),
            std::string::npos)
      << past.err;
  EXPECT_NE(past.out.find("| pp600 |"), std::string::npos) << past.out;
  EXPECT_NE(past.out.find("| tg4 |"), std::string::npos) << past.out;
  auto far = run_perfx("bench -p 3000 -n 4 -r 1");
  EXPECT_EQ(far.exit_code, 1);
  EXPECT_NE(far.err.find("perfx: error: -p 3000 needs a context of 3001 tokens, more than 4 times "
                         "the model's trained context of 512 tokens (-p can be at most 2047)\n"),
            std::string::npos)
      << far.err;
  EXPECT_EQ(far.out, "");
  auto far_n = run_perfx("bench -p 16 -n 2100 -r 1");
  EXPECT_EQ(far_n.exit_code, 1);
  EXPECT_NE(far_n.err.find("perfx: error: -n 2100 needs a context of 2102 tokens, more than 4 "
                           "times the model's trained context of 512 tokens (-n can be at most "
                           "2046)\n"),
            std::string::npos)
      << far_n.err;
}

// bench sized its KV cache for -B sequences of its longest test whatever ran: `-p 256 -n 0 -B 4096`
// (no tg test; the pp test runs one sequence) asked for 1,052,736 tokens, 8 GiB of fp32 KV for
// models/default, and failed where memory is limited ("cannot allocate the KV cache"); and its 64
// tokens of slack fell short of whole blocks for many short sequences (`-n 17 -B 64`: "KV cache is
// full: 64 blocks needed, 16 free"). Now it holds the largest test's sequences in whole blocks.
TEST(CliBench, KvCacheIsSizedForTheTestsThatRun) {
#if !defined(__SANITIZE_ADDRESS__)  // ASan reserves terabytes of address space: no ulimit -v
  auto pp = run_perfx_within(1000000, "bench -p 256 -n 0 -B 4096 -r 1 -t 1");
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  EXPECT_NE(pp.out.find("| pp256 |"), std::string::npos) << pp.out;
#endif
  auto tg = run_perfx("bench -p 0 -n 17 -B 1,64 -r 1 -t 2");
  ASSERT_EQ(tg.exit_code, 0) << tg.err;
  EXPECT_NE(tg.out.find("| tg17 |"), std::string::npos) << tg.out;
  EXPECT_NE(tg.out.find("| tg17 x64 |"), std::string::npos) << tg.out;
}

// vLLM's --kv-cache-dtype sets K and V at once (int8 is q8_0); it cannot be mixed with
// llama.cpp's per-tensor flags, and a bad value names the flag.
TEST(CliPerplexity, KvCacheDtypeIsBothCacheTypes) {
  const std::string base = "perplexity -f " + kDefault + "/heldout.txt -c 64 --chunks 2 -t 2";
  auto pair = run_perfx(base + " --cache-type-k q8_0 --cache-type-v q8_0");
  ASSERT_EQ(pair.exit_code, 0) << pair.err;
  auto one = run_perfx(base + " --kv-cache-dtype int8");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, pair.out);
  auto f32 = run_perfx(base + " --kv-cache-dtype auto");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_NE(f32.out, pair.out) << "q8_0 rounds K and V: the PPL must move in its last digits";
  auto both = run_perfx(base + " --kv-cache-dtype q8_0 --cache-type-k f16");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("--kv-cache-dtype"), std::string::npos) << both.err;
  auto bad = run_perfx(base + " --kv-cache-dtype fp4");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--kv-cache-dtype: must be auto, f16, bf16, f32, q8_0 or int8, got 'fp4'"),
            std::string::npos)
      << bad.err;
  auto bf16 = run_perfx(base + " --kv-cache-dtype bf16");  // a GPU's type, not the CPU's
  EXPECT_NE(bf16.exit_code, 0);
  EXPECT_NE(bf16.err.find("KV cache type bf16 (--cache-type-k/-v or --kv-cache-dtype) is not "
                          "supported on the CPU"),
            std::string::npos)
      << bf16.err;
  EXPECT_EQ(bf16.err.find("cannot allocate"), std::string::npos) << "not a memory problem: " << bf16.err;
}

// A cache type the model's shape rules out (q8_0 blocks of 32 over stories260K's head_dim 8) is the
// flag's problem: the error names the flag and the head_dim, and does not blame memory.
TEST(CliRun, KvCacheTypeThatTheShapeRulesOutNamesTheFlag) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/config.json");
  auto r = run_perfx("run -m " + shared_path("models/stories260K-hf") +
                     " -p '' -n 4 --temp 0 -t 2 --cache-type-k q8_0 --cache-type-v q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("KV cache type q8_0 (--cache-type-k/-v or --kv-cache-dtype) needs a "
                       "head_dim that is a multiple of 32 (this model's is 8)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("cannot allocate"), std::string::npos) << "not a memory problem: " << r.err;
}

// --lm-head-type q8_0 / q4_0: the lm_head quantized at load (its logits:
// tests/model/lm_head_type_test.cpp). models/default ties its head to the embedding table, so the
// quantized copy adds its own bytes: Q8_0's more than Q4_0's.
TEST(CliRun, LmHeadTypeRunsAndAnUnknownTypeIsRefused) {
  const std::string run = "run -m " + kDefault + " -p 'Once upon a time' -n 8 --temp 0 -t 2";
  auto plain = run_perfx(run);
  auto q8 = run_perfx(run + " --lm-head-type q8_0");
  auto q4 = run_perfx(run + " --lm-head-type q4_0");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(q8.exit_code, 0) << q8.err;
  ASSERT_EQ(q4.exit_code, 0) << q4.err;
  auto bytes = [](const std::string& err) {
    const size_t k = err.find("weight bytes ");
    return k == std::string::npos ? 0ull : std::stoull(err.substr(k + 13));
  };
  EXPECT_GT(bytes(q8.err), bytes(q4.err)) << q8.err << q4.err;
  EXPECT_GT(bytes(q4.err), bytes(plain.err)) << plain.err << q4.err;
  auto bad = run_perfx("run -m " + kDefault + " -n 2 --lm-head-type no-such-type");
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find("--lm-head-type: no-such-type not in {q8_0,q4_0}"), std::string::npos)
      << bad.err;
}

TEST(CliPerplexity, ProgressIsSparseInAFileAndOneLineOnATerminal) {
  const std::string args = "perplexity -f " + kDefault + "/heldout.txt -c 16 --chunks 40 -t 2";
  auto r = run_perfx(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t progress = 0;
  for (size_t k = r.err.find("perplexity: ["); k != std::string::npos;
       k = r.err.find("perplexity: [", k + 1))
    ++progress;
  EXPECT_EQ(progress, 10u) << "one line per 10% of the 40 windows\n" << r.err;
  EXPECT_NE(r.err.find("perplexity: [40/40]"), std::string::npos) << r.err;
  ASSERT_GE(r.out.size(), 2u);
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("PPL = ", 0), 0u) << r.out;
  double ppl = 0, err = 0;
  EXPECT_EQ(std::sscanf(last.c_str(), "PPL = %lf +/- %lf", &ppl, &err), 2) << last;

  // On a terminal (script(1) gives it a pty): one line redrawn with \r, one newline at the end.
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1)";
  const std::string dir = make_temp_dir("ppl-tty");
  const std::string cmd = "script -qec " +
                          sh_quote(std::string(PERFX_BIN) + " " + args + " >/dev/null") +
                          " /dev/null >" + dir + "/tty 2>&1 </dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string tty = read_file(dir + "/tty");
  std::system(("rm -rf " + dir).c_str());
  EXPECT_NE(tty.find("\r\033[Kperplexity: [1/40]"), std::string::npos) << tty;
  EXPECT_NE(tty.find("\r\033[Kperplexity: [40/40]"), std::string::npos) << tty;
  EXPECT_LE(std::count(tty.begin(), tty.end(), '\n'), 4) << tty;
}

TEST(CliTokenize, DefaultModelIds) {
  auto r = run_perfx("tokenize -p 'In the beginning'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0 1145 260 1998\n");  // from models/default/reference_greedy.json (HF tokenizer)
}

// Issue 8: one BOS rule: tokenize shows the ids run feeds the model (and --dump-logits writes); a
// BOS written in the prompt is kept beside the added one, with one warning line.
TEST(CliTokenize, SameIdsAsRunWithOneBosRule) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  const std::string m = shared_path("models/stories260K-hf");
  auto t = run_perfx("tokenize -m " + m + " -p '<s>Once upon a time'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out, "1 1 403 407 261 378\n");
  const std::string warning = "perfx: warning: the prompt starts with the BOS text '<s>'";
  EXPECT_NE(t.err.find(warning), std::string::npos) << t.err;
  const std::string dir = make_temp_dir("bos");
  auto r = run_perfx("run -m " + m + " -p '<s>Once upon a time' -n 0 --dump-logits " + dir +
                     "/l.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = SafetensorsFile::open(dir + "/l.safetensors");
  const TensorView* ids = f->find("input_ids");
  ASSERT_TRUE(ids);
  ASSERT_EQ(ids->shape, std::vector<int64_t>{6});
  const int32_t* p = static_cast<const int32_t*>(ids->data);
  EXPECT_EQ(std::vector<int32_t>(p, p + 6), (std::vector<int32_t>{1, 1, 403, 407, 261, 378}));
  EXPECT_EQ(r.err.find(warning), r.err.rfind(warning)) << "one warning line\n" << r.err;
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
  std::system(("rm -rf " + dir).c_str());
  EXPECT_EQ(run_perfx("tokenize -m " + m + " -p ''").out, "1\n");
  EXPECT_EQ(run_perfx("tokenize -m " + m + " -p '' --no-bos").out, "\n");
  if (path_exists_for_test(shared_path("tokenizers/llama3/tokenizer.json"))) {
    // No BOS by default (as HF for this tokenizer.json); an empty prompt starts from BOS, as in run.
    const std::string l3 = shared_path("tokenizers/llama3");
    EXPECT_EQ(run_perfx("tokenize -m " + l3 + " -p 'Hello world'").out, "9906 1917\n");
    EXPECT_EQ(run_perfx("tokenize -m " + l3 + " -p ''").out, "128000\n");
  }
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

/// models/default as a Mistral with a 64-token sliding window (config.json edited, the weights
/// linked).
std::string copy_with_sliding_window(const std::string& tag) {
  const std::string dir = copy_default(tag);
  std::string cfg = read_file(dir + "/config.json");
  cfg.replace(cfg.find("\"llama\""), 7, "\"mistral\"");
  cfg.replace(cfg.find("\"vocab_size\""), 0, "\"sliding_window\": 64,\n  ");
  write_file(dir + "/config.json", cfg);
  std::system(("ln -s " + kDefault + "/model.safetensors " + dir + "/model.safetensors").c_str());
  return dir;
}

TEST(CliErrors, MissingModel) { expect_error("run -m /nonexistent/model -p hi", "does not exist"); }

// Issue 8: a sampled run announced its random seed before failing to load: the error is the only
// line now (the seed is printed when generation starts).
TEST(CliErrors, ABadModelGivesOnlyTheErrorLine) {
  auto r = run_perfx("run -m /nonexistent/model -p hi --temp 0.8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "perfx: error: model path '/nonexistent/model' does not exist\n");
}

TEST(CliErrors, NotAModel) {
  const std::string dir = make_temp_dir("notmodel");
  write_file(dir + "/x.gguf", "this is not a gguf file at all");
  // A file that is not GGUF: say what was expected, for run and for the tokenizer-only path.
  const std::string want =
      "is not a GGUF file (bad magic 'this' (74 68 69 73), expected 'GGUF') "
      "and not a Hugging Face model folder";
  expect_error("run -m " + dir + "/x.gguf -p hi", want);
  expect_error("tokenize -m " + dir + "/x.gguf -p hi", want);
  write_file(dir + "/empty.bin", "");
  expect_error("run -m " + dir + "/empty.bin -p hi", "not a GGUF file (the file is empty)");
  expect_error("run -m " + kDefault + "/model.safetensors -p hi",
               "and not a Hugging Face model folder; give the folder that holds it");
  // A folder that holds a GGUF file but no config.json names the file to give instead.
  expect_error("run -m " + dir + " -p hi", "model folder '" + dir +
                                               "' has no config.json (expected a Hugging Face "
                                               "checkpoint); it holds " +
                                               dir + "/x.gguf: give that file");
  const std::string empty = make_temp_dir("notmodel_empty");
  auto r = run_perfx("run -m " + empty + " -p hi");
  EXPECT_EQ(r.err, "perfx: error: model folder '" + empty +
                       "' has no config.json (expected a Hugging Face checkpoint)\n");
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

// A context above Mistral v0.1's sliding window would silently attend past the window (not
// implemented): refused with the key named; a context within it runs.
TEST(CliErrors, ContextPastTheSlidingWindow) {
  const std::string dir = copy_with_sliding_window("swa");
  expect_error("run -m " + dir + " -p hi -c 100", "sliding_window 64");
  auto ok = run_perfx("run -m " + dir + " -p hi -n 2 -c 64");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// bench's errors named flags that bench does not have: past a sliding window run's ("so use -c <=
// 64"), over the engine's most KV cache and out of memory serve's ("--kv-cache-tokens 81928256 is
// out of range", "lower --kv-cache-tokens, --kv-cache-mib or -c"). Now bench's -p, -n and -B, as
// its error past 4 times the trained context; run keeps its words.
TEST(CliBench, ErrorsNameOnlyBenchsFlags) {
  const std::string dir = copy_with_sliding_window("swa-bench");
  const std::string window =
      " tokens, more than the model's sliding_window of 64 tokens (config.json), past which "
      "attention is not implemented ";
  auto p = run_perfx("bench -m " + dir + " -p 100 -n 4 -r 1");
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_EQ(p.err,
            "perfx: error: -p 100 needs a context of 101" + window + "(-p can be at most 63)\n");
  auto n = run_perfx("bench -m " + dir + " -p 16 -n 70 -r 1");
  EXPECT_EQ(n.exit_code, 1);
  EXPECT_EQ(n.err,
            "perfx: error: -n 70 needs a context of 72" + window + "(-n can be at most 62)\n");
  auto most = run_perfx("bench -m " + dir + " -p 63 -n 62 -r 1 -t 2");
  ASSERT_EQ(most.exit_code, 0) << most.err;
  EXPECT_NE(most.out.find("| tg62 |"), std::string::npos) << most.out;
  auto run = run_perfx("run -m " + dir + " -p hi -c 100");
  EXPECT_EQ(run.err,
            "perfx: error: context 100 exceeds the model's sliding_window 64 (config.json); "
            "attention past the window is not implemented, so use -c <= 64\n");
  auto kv = run_perfx("bench -p 16 -n 20000 -B 4096");
  EXPECT_EQ(kv.exit_code, 1);
  EXPECT_EQ(kv.err,
            "perfx: error: -n 20000 with -B 4096 needs a KV cache of 81985536 tokens, more than "
            "the engine holds (67108864); lower -n or -B\n");
#if !defined(__SANITIZE_ADDRESS__)  // ASan reserves terabytes of address space: no ulimit -v
  // 1000 sequences of 2016 tokens: 15.4 GiB of fp32 KV for models/default, over a 1 GB limit.
  auto mem = run_perfx_within(1000000, "bench -p 16 -n 2000 -B 1000 -r 1 -t 1");
  EXPECT_EQ(mem.exit_code, 1);
  EXPECT_EQ(mem.err,
            "perfx: error: cannot allocate the KV cache (2016000 tokens): out of memory allocating "
            "15750 MiB (mmap: Cannot allocate memory; lower -n or -B)\n");
#endif
}

// `-m ""` (a script's unset $MODEL) ran models/default silently, in every subcommand; `run --stop
// ""` was accepted where the server refuses an empty stop string. Both are errors naming the flag.
TEST(CliErrors, EmptyModelOrStopStringIsRefused) {
  for (const char* sub : {"run -p hi -n 2", "bench -p 0 -n 2 -r 1", "perplexity", "tokenize -p hi",
                          "quantize -o /nonexistent/q", "serve --port 0"}) {
    const std::string args = std::string(sub) + " -m ''";
    auto r = run_perfx(args, 60);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err,
              "perfx: error: -m/--model is empty; give a model path, or omit -m for "
              "models/default\n")
        << args;
  }
  expect_error("run -p hi -n 2 --stop ''", "perfx: error: --stop must not be an empty string");
  EXPECT_EQ(run_perfx("run -p hi -n 2 --stop 'xyz'").exit_code, 0);
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

TEST(CliErrors, SamplingFlagsOutOfRangeNameTheFlag) {
  expect_error("run -p hi --top-k -3", "perfx: error: --top-k must be >= -1 (0 or -1 = off), got -3");
  EXPECT_EQ(run_perfx("run -p hi -n 2 --top-k -1").exit_code, 0) << "-1 is llama.cpp's and vLLM's \"off\"";
  expect_error("run -p hi --top-p 1.5", "perfx: error: --top-p must be in (0, 1]");
  expect_error("run -p hi --min-p -0.1", "perfx: error: --min-p must be in [0, 1]");
  expect_error("run -p hi --min-p 2", "perfx: error: --min-p");
  expect_error("run -p hi --repeat-penalty 0", "perfx: error: --repeat-penalty must be > 0");
  expect_error("run -p hi --repeat-last-n -2", "perfx: error: --repeat-last-n must be >= -1");
  expect_error("run -p hi --temp -0.5", "perfx: error: --temp must be >= 0");
  expect_error("run -p hi -t -1", "thread count -1 is out of range");
  expect_error("run -p hi -t 1025", "thread count 1025 is out of range");
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

// A value that is not of a numeric flag's type got CLI11's own words ("Could not convert:
// --n-predict = abc"); now the flag, both its names, and what it expects.
TEST(CliErrors, NonNumericValueNamesTheFlagAndItsType) {
  auto expect_line = [](const std::string& args, const std::string& line) {
    auto r = run_perfx(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, "perfx: error: " + line + "\n") << args;
  };
  expect_line("run -p hi -n abc", "-n/--n-predict expects an integer, got 'abc'");
  // A flag at the end without its value: CLI11 said "--n-predict: 1 required INT missing", naming
  // neither the short flag nor what to give (a fresh user's report).
  expect_line("run -p hi -n", "-n/--n-predict needs a value (an integer)");
  expect_line("run -p hi --temp", "--temp needs a value (a number)");
  expect_line("bench -m", "-m/--model needs a value");
  expect_line("run -p hi -n 3 -n abc", "-n/--n-predict expects an integer, got 'abc'");
  expect_line("run -p hi -t 1.5", "-t/--threads expects an integer, got '1.5'");
  expect_line("run -p hi --temp warm", "--temp expects a number, got 'warm'");
  expect_line("run -p hi -n 99999999999",
              "-n/--n-predict expects an integer, got '99999999999' (out of range)");
  expect_line("bench -r x", "-r/--repetitions expects an integer, got 'x'");
  // CLI11 read an empty value as 0 (`-n ""` generated nothing, `--temp ""` ran greedy), a seed past
  // 64 bits as the largest one, and "-1" for an unsigned flag as 2^64 - 1.
  expect_line("run -p hi -n ''", "-n/--n-predict expects an integer, got an empty value");
  expect_line("run -p hi --temp ''", "--temp expects a number, got an empty value");
  expect_line("serve --port ''", "--port expects an integer, got an empty value");
  expect_line("run -p hi -s 99999999999999999999",
              "-s/--seed expects an integer, got '99999999999999999999' (out of range)");
  expect_line("run -p hi -n 0x10", "-n/--n-predict expects an integer, got '0x10'");
  // and "010" as octal 8: now 10, as llama.cpp reads it
  auto ten = run_perfx("run -p hi --temp 0 -n 010 --ignore-eos");
  EXPECT_EQ(ten.exit_code, 0) << ten.err;
  EXPECT_NE(ten.err.find("generated 10 tokens"), std::string::npos) << ten.err;
  expect_line("perplexity -c x", "-c/--ctx-size expects an integer, got 'x'");
  // bench's -p / -n / -B take comma lists, parsed by bench itself.
  expect_line("bench -p x",
              "-p/--n-prompt expects an integer or a comma-separated list of them, got 'x'");
  expect_line("bench -n 1.5",
              "-n/--n-gen expects an integer or a comma-separated list of them, got '1.5'");
  // A last comma was dropped without a word ("-p 16," ran pp16; ",16" was an error), and a value
  // past an int did not say so, as run's -n does.
  expect_line("bench -p 16,",
              "-p/--n-prompt expects an integer or a comma-separated list of them, got '16,'");
  expect_line("bench -B 99999999999",
              "-B/--batch-seqs expects an integer or a comma-separated list of them, got "
              "'99999999999' (out of range)");
}

// Issue 8: a typo or a missing subcommand names the word and lists the subcommands (was "A
// subcommand is required").
TEST(CliErrors, UnknownSubcommandIsNamedAndTheSubcommandsListed) {
  const std::string list = "run, tokenize, quantize, perplexity, serve";
  for (const char* word : {"runn", "benchmark"}) {
    auto r = run_perfx(std::string(word) + " -p hi");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(std::string("perfx: error: unknown subcommand '") + word + "'"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(list), std::string::npos) << r.err;
  }
  auto none = run_perfx("");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("a subcommand is required: " + list), std::string::npos) << none.err;
  EXPECT_EQ(run_perfx("--version").exit_code, 0);
}

// A misspelled flag got CLI11's "The following arguments were not expected: 0.5 --tmp" (the words
// reversed, the value listed as wrong too); now the flag, the subcommand and the nearest flag.
TEST(CliErrors, UnknownFlagIsNamedWithTheNearestOne) {
  auto line = [](const std::string& args) {
    auto r = run_perfx(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    return r.err;
  };
  EXPECT_EQ(line("run --tmp 0.5 -p hi"),
            "perfx: error: unknown option '--tmp' for 'perfx run'; did you mean --temp? (see perfx "
            "run --help)\n");
  EXPECT_EQ(line("serve --prot 8080"),
            "perfx: error: unknown option '--prot' for 'perfx serve'; did you mean --port? (see "
            "perfx serve --help)\n");
  EXPECT_EQ(line("run -p hi --n-predit=3"),
            "perfx: error: unknown option '--n-predit' for 'perfx run'; did you mean --n-predict? "
            "(see perfx run --help)\n");
  EXPECT_EQ(line("run -p hi --zzzzzzzz"),
            "perfx: error: unknown option '--zzzzzzzz' for 'perfx run' (see perfx run --help)\n");
  EXPECT_EQ(line("run -p hi -n -3 stray"),
            "perfx: error: unexpected argument 'stray' for 'perfx run' (see perfx run --help)\n");
  EXPECT_EQ(line("run -p hi --temp=0.5 stray"),
            "perfx: error: unexpected argument 'stray' for 'perfx run' (see perfx run --help)\n");
  // what CLI11 placed is not blamed: a value attached to a short flag, a list option's words, a
  // value that starts with a dash
  const std::string tmp =
      "perfx: error: unknown option '--tmp' for 'perfx run'; did you mean --temp? (see perfx run "
      "--help)\n";
  EXPECT_EQ(line("run -t2 -p hi --tmp 0.5"), tmp);
  EXPECT_EQ(line("run --stop '###' '</s>' -p hi --tmp 0.5"), tmp);
  EXPECT_EQ(line("run -p '- item' --tmp 0.5"), tmp);
}

// A value the flag refuses pointed at `perfx --help`, which lists no subcommand's flags; now the
// hint names the subcommand's own help.
TEST(CliErrors, ARefusedValuePointsAtTheSubcommandsHelp) {
  auto run = run_perfx("run -n 2 --lm-head-type q3");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.err,
            "perfx: error: --lm-head-type: q3 not in {q8_0,q4_0} (see perfx run --help)\n");
  auto bench = run_perfx("bench --lm-head-type q3");
  EXPECT_EQ(bench.exit_code, 1) << bench.err;
  EXPECT_EQ(bench.err,
            "perfx: error: --lm-head-type: q3 not in {q8_0,q4_0} (see perfx bench --help)\n");
}

// Values that overflowed later: `serve --timeout 1e10` started a server whose every request "timed
// out after -2147483648 s", `--max-body-mib 1e30` one that refused every body ("the limit is 0
// bytes"), `bench-serve --duration 1e300` issued no request; `--api-key ""` (an unset variable)
// turned authentication off without a word.
TEST(CliErrors, ServeBoundsThatOverflowedAndAnEmptyApiKey) {
  auto expect_line = [](const std::string& args, const std::string& line) {
    auto r = run_perfx(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.err, "perfx: error: " + line + "\n") << args;
  };
  expect_line("serve --timeout 1e10",
              "--timeout must be 0 (no limit) to 31536000 seconds (a year), got 1e+10");
  expect_line("serve --timeout inf",
              "--timeout must be 0 (no limit) to 31536000 seconds (a year), got inf");
  expect_line("serve --max-body-mib 1e30", "--max-body-mib must be in (0, 4096], got 1e+30");
  expect_line("serve --api-key ''",
              "--api-key is empty (an unset variable?); give a key, or leave the flag out for no "
              "authentication");
  expect_line("bench-serve --url http://127.0.0.1:9 --duration 1e300",
              "--duration must be 0 (no limit) to 31536000 seconds (a year), got 1e+300");
}

// bench-serve's negated flags were CLI11 "!" flags, which its help printed as
// `--no-ignore-eos{false}`; now plain flags, and the run's first line says what they changed.
TEST(CliBenchServe, NegatedFlagsShowInTheHelpAndTheRunLine) {
  auto help = run_perfx("bench-serve --help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--no-ignore-eos "), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--same-prompt "), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("{false}"), std::string::npos) << help.out;
  // nothing listens on port 9: the run fails at once, after its first line
  const std::string base = "bench-serve --url http://127.0.0.1:9 --requests 1 --warmup 0";
  auto plain = run_perfx(base);
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_NE(plain.err.find("prompt 128 tokens, 128 output tokens\n"), std::string::npos)
      << plain.err;
  auto flags = run_perfx(base + " --no-ignore-eos --same-prompt");
  EXPECT_EQ(flags.exit_code, 1);
  EXPECT_NE(flags.err.find("prompt 128 tokens (one prompt for all), up to 128 output tokens "
                           "(stops at EOS)\n"),
            std::string::npos)
      << flags.err;
  // httplib's bare "(Connection)" said neither what failed nor what to check.
  EXPECT_NE(flags.err.find("perfx: error: cannot reach http://127.0.0.1:9 (no connection: is a "
                           "server listening there?)"),
            std::string::npos)
      << flags.err;
}

// `run -n 0` printed only the load line; now it says that nothing was generated.
TEST(CliRun, NothingToGenerateIsSaid) {
  auto r = run_perfx("run -p 'In the beginning' -n 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("perfx: prompt "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" tokens; nothing generated (-n 0)\n"), std::string::npos) << r.err;
}

// Issue 8: `perfx run -f FILE` reads the prompt from a file (as llama.cpp: one trailing newline
// dropped); --dump-logits onto a folder, or into a missing one, is a plain error before the model
// loads.
TEST(CliRun, PromptFromAFileAndDumpLogitsOntoAFolder) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  const std::string m = shared_path("models/stories260K-hf");
  const std::string dir = make_temp_dir("promptfile");
  write_file(dir + "/p.txt", "Once upon a time,\n");
  auto f = run_perfx("run -m " + m + " -f " + dir + "/p.txt -n 4 --temp 0");
  auto p = run_perfx("run -m " + m + " -p 'Once upon a time,' -n 4 --temp 0");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, p.out);
  EXPECT_EQ(f.out, " there was a little\n");
  EXPECT_EQ(run_perfx("tokenize -m " + m + " -f " + dir + "/p.txt").out,
            run_perfx("tokenize -m " + m + " -p 'Once upon a time,'").out);
  expect_error("run -m " + m + " -f " + dir + "/p.txt -p x", "not both");
  expect_error("run -m " + m + " -f " + dir + "/missing.txt", "-f: '" + dir + "/missing.txt' does not exist");
  expect_error("run -m " + m + " -f " + dir, "is a folder");
  auto d = run_perfx("run -m " + m + " -p hi -n 1 --dump-logits " + dir);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_EQ(d.err, "perfx: error: --dump-logits: '" + dir + "' is a folder; give a file path such as '" +
                       dir + "/logits.safetensors'\n");
  // A path in a folder that does not exist: refused before the model loads (it used to load,
  // run, then fail naming the writer's internal '.tmp' file).
  auto g = run_perfx("run -m " + m + " -p hi -n 1 --dump-logits " + dir + "/no/l.safetensors");
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_EQ(g.err, "perfx: error: --dump-logits: the folder '" + dir +
                       "/no' does not exist (create it first)\n");
  expect_error("run -m " + m + " -p hi -n 1 --dump-logits ''",
               "--dump-logits needs a file path, got an empty string");  // was silently ignored
  std::system(("rm -rf " + dir).c_str());
}

// Fresh-user run: a flag given twice was an error ("At Most 1 required"); the last value wins.
TEST(CliRun, RepeatedFlagTakesTheLastValue) {
  auto r = run_perfx("run -p 'In the beginning' --temp 0 -n 1 -n 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("generated 3 tokens"), std::string::npos) << r.err;
}

// Fresh-user run: a sampled run without --seed could not be repeated (the seed was not shown).
TEST(CliRun, RandomSeedIsPrintedAndRepeatsTheRun) {
  auto r = run_perfx("run -p 'In the beginning' -n 24 --temp 1.0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string key = "perfx: seed ";
  const size_t at = r.err.find(key);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string seed = r.err.substr(at + key.size(), r.err.find(' ', at + key.size()) - at - key.size());
  auto again = run_perfx("run -p 'In the beginning' -n 24 --temp 1.0 --seed " + seed);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, r.out) << "seed " << seed;
  EXPECT_EQ(again.err.find(key), std::string::npos) << "an explicit seed is not announced";
  expect_error("run -p hi --seed -2", "perfx: error: --seed must be >= 0, or -1 for a random seed, got -2");
}

}  // namespace
}  // namespace perfx::test
