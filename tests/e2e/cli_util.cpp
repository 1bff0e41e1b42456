#include "e2e/cli_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "support/test_support.h"

namespace perfx::test {

std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {
/// The folders make_temp_dir made, removed at exit by the process that made them.
class TempDirs {
 public:
  ~TempDirs() {
    if (getpid() != owner_) return;  // a forked child exiting: the folders are its parent's
    std::error_code ec;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ec);
  }
  void add(const std::string& d) {
    std::lock_guard<std::mutex> lk(mu_);
    dirs_.push_back(d);
  }

 private:
  const pid_t owner_ = getpid();
  std::mutex mu_;
  std::vector<std::string> dirs_;
};
}  // namespace

std::string make_temp_dir(const std::string& tag) {
  static TempDirs made;
  std::string tmpl = "/tmp/perfx-" + tag + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  made.add(tmpl);
  return tmpl;
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
  if (!f) throw std::runtime_error("cannot write " + path);
}

namespace {
CmdResult run_perfx_after(const std::string& shell_prefix, const std::string& args, int timeout_s) {
  const std::string dir = make_temp_dir("cmd");
  const std::string limit =
      timeout_s > 0 ? "timeout -s KILL " + std::to_string(timeout_s) + " " : "";
  // PERFX_TEST_BIN: the perfx binary when the tests run away from their build tree (device calls).
  const char* bin = std::getenv("PERFX_TEST_BIN");
  const std::string cmd = shell_prefix + limit + std::string(bin && *bin ? bin : PERFX_BIN) + " " +
                          args + " >" + dir + "/out 2>" + dir + "/err </dev/null";
  CmdResult r;
  const int st = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_file(dir + "/out");
  r.err = read_file(dir + "/err");
  std::system(("rm -rf " + dir).c_str());
  return r;
}
}  // namespace

CmdResult run_perfx(const std::string& args, int timeout_s) {
  return run_perfx_after("", args, timeout_s);
}

CmdResult run_perfx_within(long vmem_kib, const std::string& args, int timeout_s) {
  return run_perfx_after("ulimit -v " + std::to_string(vmem_kib) + "; MALLOC_ARENA_MAX=1 ", args,
                         timeout_s);
}

}  // namespace perfx::test
