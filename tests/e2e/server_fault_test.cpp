// Issue 13, fault injection and security defaults of `perfx serve` on models/default, each in a
// fresh server process: a KV cache that cannot be allocated, the model's files replaced or deleted
// while the server runs, the default bind address. (SIGTERM during a stream:
// ServeE2E.SigtermAbortsInFlightStreamsAndExitsPromptly; the request limits: tests/unit/server.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "e2e/cli_util.h"
#include "e2e/server_util.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

using json = nlohmann::json;

// Runs a shell command line; returns the exit status (128 + signal when killed).
int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A greedy completion's text, or "" with the status in *status.
std::string greedy(int port, int* status) {
  HttpResponse r = http_request(port, "POST", "/v1/completions",
                                R"({"prompt": "In the beginning", "max_tokens": 12, "temperature": 0})");
  *status = r.status;
  if (r.status != 200) return "";
  return json::parse(r.body)["choices"][0]["text"].get<std::string>();
}

// The KV cache is allocated at load; under an address-space limit (a container's memory limit, a
// `ulimit -v`) the allocation fails: one error line naming the KV cache, its size and the flags,
// exit status 1, no crash.
TEST(ServeFaults, KvCacheAllocationFailureIsAClearError) {
  REQUIRE_DEFAULT_MODEL();
#if !defined(__SANITIZE_ADDRESS__)  // ASan reserves terabytes of address space: no ulimit -v
  const std::string dir = make_temp_dir("kvfail");
  // 1,000,000 tokens of fp32 KV for models/default: 7.6 GiB, over the 1 GiB limit. One compute
  // thread and one malloc arena: on a many-core host the threads' stacks and arenas, created
  // before the KV cache, could use up the limit first.
  const int rc = sh("ulimit -v 1000000; MALLOC_ARENA_MAX=1 exec " + std::string(PERFX_BIN) +
                    " serve -m " + sh_quote(default_model()) +
                    " -t 1 --port 0 --kv-cache-tokens 1000000 >" + dir +
                    "/out 2>" + dir + "/err </dev/null");
  const std::string err = read_file(dir + "/err");
  sh("rm -rf " + dir);
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("perfx: error: cannot allocate the KV cache (1000000 tokens): out of memory "
                     "allocating 7812 MiB"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("--kv-cache-tokens"), std::string::npos) << err;
#endif
  // An absurd size is refused before any allocation, naming the flag and the range.
  CmdResult r = run_perfx("serve -m " + sh_quote(default_model()) +
                              " --port 0 --kv-cache-tokens 2000000000",
                          60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("perfx: error: --kv-cache-tokens 2000000000 is out of range"),
            std::string::npos)
      << r.err;
}

// Review: every connection thread starts with the server, and httplib's thread pool terminated the
// process when one could not be started (here: under `ulimit -v`, 4096 stacks of 8 MiB do not fit).
// Now one error line names the thread count and the flag, exit status 1.
TEST(ServeFaults, ConnectionThreadsThatCannotStartAreAClearError) {
  REQUIRE_DEFAULT_MODEL();
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan reserves terabytes of address space: no ulimit -v";
#else
  const std::string dir = make_temp_dir("threadfail");
  const int rc = sh("ulimit -v 1000000; MALLOC_ARENA_MAX=1 exec " + std::string(PERFX_BIN) +
                    " serve -m " + sh_quote(default_model()) +
                    " -t 1 --port 0 --kv-cache-tokens 4096 --max-connections 4096 >" + dir +
                    "/out 2>" + dir + "/err </dev/null");
  const std::string err = read_file(dir + "/err");
  sh("rm -rf " + dir);
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("perfx: error: cannot start 4096 connection threads (--max-connections "
                     "4096): "),
            std::string::npos)
      << err;
#endif
}

// The weights are mmapped and the tokenizer read at load. Replacing the files the way tools do
// (write a new file, rename it over the old one) or deleting them leaves the server's mapping of
// the old inode intact: the next requests answer as before. (Truncating or rewriting the mapped
// file in place is not protected: the kernel then raises SIGBUS on the next read of a lost page,
// as with every mmap-based server; docs/RELIABILITY.md.)
TEST(ServeFaults, ModelFilesReplacedOrDeletedWhileServing) {
  REQUIRE_DEFAULT_MODEL();
  const std::string dir = make_temp_dir("replace");
  ASSERT_EQ(sh("cp " + sh_quote(default_model()) + "/config.json " + sh_quote(default_model()) +
               "/model.safetensors " + sh_quote(default_model()) + "/tokenizer.json " +
               sh_quote(default_model()) + "/tokenizer_config.json " + dir),
            0);
  ServerProcess srv("-m " + dir + " -t 1");
  ASSERT_TRUE(srv.ok()) << srv.log();
  int status = 0;
  const std::string before = greedy(srv.port(), &status);
  ASSERT_EQ(status, 200);
  ASSERT_FALSE(before.empty());
  // Replaced by rename: a different (here: broken) file under the same names.
  write_file(dir + "/model.safetensors.new", "not a safetensors file");
  write_file(dir + "/tokenizer.json.new", "{");
  ASSERT_EQ(std::rename((dir + "/model.safetensors.new").c_str(),
                        (dir + "/model.safetensors").c_str()),
            0);
  ASSERT_EQ(std::rename((dir + "/tokenizer.json.new").c_str(), (dir + "/tokenizer.json").c_str()),
            0);
  EXPECT_EQ(greedy(srv.port(), &status), before);
  EXPECT_EQ(status, 200);
  // Deleted.
  ASSERT_EQ(sh("rm -f " + dir + "/*"), 0);
  EXPECT_EQ(greedy(srv.port(), &status), before);
  EXPECT_EQ(status, 200);
  HttpResponse chat = http_request(srv.port(), "POST", "/v1/chat/completions",
                                   R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})");
  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(srv.stop(), 0) << srv.log();
  sh("rm -rf " + dir);
}

// A non-loopback IPv4 address of this machine, or "".
std::string non_loopback_ipv4() {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return "";
  std::string out;
  for (ifaddrs* i = ifs; i && out.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
    char buf[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) out = buf;
  }
  freeifaddrs(ifs);
  return out;
}

// Without --host the server listens on 127.0.0.1 only: it says so, and this machine's other
// addresses refuse the connection.
TEST(ServeSecurity, BindsLoopbackUnlessHostSaysOtherwise) {
  REQUIRE_DEFAULT_MODEL();
  ServerProcess srv("-m " + sh_quote(default_model()), /*pass_host=*/false);
  ASSERT_TRUE(srv.ok()) << "no 'listening on http://127.0.0.1:' line\n" << srv.log();
  EXPECT_EQ(http_request(srv.port(), "GET", "/health").status, 200);
  const std::string ip = non_loopback_ipv4();
  if (ip.empty()) {
    std::printf("[ perfx ] no non-loopback IPv4 address here: only the listening line checked\n");
    return;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)srv.port());
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  const int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  close(fd);
  EXPECT_NE(rc, 0) << "the server accepted a connection on " << ip;
}

// --max-connections through the real binary: with one slot held by an idle connection, a request
// gets 503 naming the flag; once it closes, requests are served again. Bad values name the flag.
TEST(ServeSecurity, MaxConnectionsFlag) {
  REQUIRE_DEFAULT_MODEL();
  CmdResult bad = run_perfx("serve -m " + sh_quote(default_model()) + " --max-connections -1", 60);
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find("perfx: error: --max-connections must be 0..4096"), std::string::npos)
      << bad.err;
  ServerProcess srv("-m " + sh_quote(default_model()) + " --max-connections 1");
  ASSERT_TRUE(srv.ok()) << srv.log();
  int idle = connect_loopback(srv.port());
  ASSERT_GE(idle, 0);
  HttpResponse r;
  for (int i = 0; i < 200 && r.status != 503; ++i) {  // until the server has accepted `idle`
    r = http_request(srv.port(), "GET", "/health");
    if (r.status != 503) usleep(10000);
  }
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("at most 1 client connection open (perfx serve --max-connections)"),
            std::string::npos)
      << r.body;
  close(idle);
  for (int i = 0; i < 200 && r.status != 200; ++i) {
    r = http_request(srv.port(), "GET", "/health");
    if (r.status != 200) usleep(10000);
  }
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

}  // namespace
}  // namespace perfx::test
