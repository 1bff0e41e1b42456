// Issue 13, fault injection outside the server: the disk fills up while `perfx quantize` writes.
// The ENOSPC shim (tests/support/enospc_shim.cpp, LD_PRELOAD) makes writes under one folder fail
// after N bytes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "e2e/cli_util.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

namespace fs = std::filesystem;

// Names in `dir` (one level).
std::string listing(const std::string& dir) {  // sorted names, each followed by a space
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += n + " ";
  return out;
}

// The disk under `dir` fills up after `limit` bytes (for perfx run by run_perfx in this scope).
// ASan: the preloaded shim comes before the sanitizer runtime; allow that.
ScopedEnv* disk_full_after(const std::string& dir, uintmax_t limit) {
  const char* asan = std::getenv("ASAN_OPTIONS");
  return new ScopedEnv({{"PERFX_ENOSPC_DIR", dir},
                        {"PERFX_ENOSPC_AFTER_BYTES", std::to_string(limit)},
                        {"LD_PRELOAD", PERFX_ENOSPC_SHIM},
                        {"ASAN_OPTIONS", std::string(asan ? asan : "") +
                                             (asan && *asan ? ":" : "") +
                                             "verify_asan_link_order=0"}});
}

// Bug: a quantize that failed half way (disk full) left its output folder behind with whatever
// was written (model.safetensors, config.json, tokenizer.json.tmp), and the message named neither
// the output nor the reason ("cannot write '.../tokenizer.json.tmp'"). Now the output is written
// into a hidden staging folder that is renamed into place at the end and removed on failure.
TEST(CliQuantize, DiskFullLeavesNoPartialOutputAndNamesThePath) {
  if (!path_exists_for_test(default_model() + "/config.json"))
    GTEST_SKIP() << "models/default is missing";
  const std::string root = make_temp_dir("enospc");
  // The bytes a complete run writes (each file once).
  CmdResult ok = run_perfx("quantize -m " + sh_quote(default_model()) + " -o " + root +
                           "/full --method rtn");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  uintmax_t total = 0;
  for (const auto& e : fs::directory_iterator(root + "/full")) total += fs::file_size(e.path());
  fs::remove_all(root + "/full");
  ASSERT_GT(total, 100000u);
  // Full from the start, in the middle of the weights, and while the tokenizer is copied last.
  for (uintmax_t limit : {uintmax_t(0), total / 2, total - 1000}) {
    SCOPED_TRACE("ENOSPC after " + std::to_string(limit) + " of " + std::to_string(total) +
                 " bytes");
    const std::string out = root + "/out";
    CmdResult r;
    {
      std::unique_ptr<ScopedEnv> full(disk_full_after(root, limit));
      r = run_perfx("quantize -m " + sh_quote(default_model()) + " -o " + out + " --method rtn");
    }
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("perfx: error: quantize: '" + out + "' was not written"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << listing(out);
    EXPECT_EQ(listing(root), "") << "left behind in " << root;
  }
  // An existing empty output folder (allowed) is kept empty on failure and filled on success.
  fs::create_directory(root + "/empty");
  CmdResult r;
  {
    std::unique_ptr<ScopedEnv> full(disk_full_after(root, 1000));
    r = run_perfx("quantize -m " + sh_quote(default_model()) + " -o " + root +
                  "/empty --method rtn");
  }
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(listing(root), "empty ");
  EXPECT_EQ(listing(root + "/empty"), "");
  r = run_perfx("quantize -m " + sh_quote(default_model()) + " -o " + root + "/empty --method rtn");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(listing(root + "/empty").find("model.safetensors"), std::string::npos);
  EXPECT_EQ(listing(root), "empty ");
  fs::remove_all(root);
}

// Bug: the staging folder sat beside -o and was renamed onto it at the end, so an output that is
// an existing empty folder reached through a symlink (ENOTDIR) or written as "OUT/." (EINVAL)
// failed only after the whole run. An existing folder is now staged inside and filled in place.
TEST(CliQuantize, ExistingOutputFolderThroughASymlinkOrDotIsFilledInPlace) {
  if (!path_exists_for_test(default_model() + "/config.json"))
    GTEST_SKIP() << "models/default is missing";
  const std::string root = make_temp_dir("qout");
  fs::create_directory(root + "/target");
  fs::create_directory_symlink(root + "/target", root + "/link");
  CmdResult r = run_perfx("quantize -m " + sh_quote(default_model()) + " -o " + root +
                          "/link --method rtn");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(root + "/link"));
  EXPECT_NE(listing(root + "/target").find("model.safetensors"), std::string::npos);
  EXPECT_EQ(listing(root), "link target ");

  fs::create_directory(root + "/dot");
  r = run_perfx("quantize -m " + sh_quote(default_model()) + " -o " + root +
                "/dot/. --method rtn");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(listing(root + "/dot").find("config.json"), std::string::npos);
  EXPECT_EQ(listing(root + "/dot").find(".perfx-partial"), std::string::npos);
  // The written checkpoint loads: the same greedy text from both.
  CmdResult a = run_perfx("run -m " + root + "/target -p Hello -n 4 --temp 0");
  CmdResult b = run_perfx("run -m " + root + "/dot -p Hello -n 4 --temp 0");
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  fs::remove_all(root);
}

}  // namespace
}  // namespace perfx::test
