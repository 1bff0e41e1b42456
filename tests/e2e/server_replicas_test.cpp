// Two CPU replicas of `perfx serve` behind Debian's nginx, configured by the committed
// deploy/nginx/perfx.conf (ports substituted): streamed completions through the balancer complete
// and land on both replicas, and when one replica is stopped mid-run its in-flight streams end
// cleanly (finish_reason "abort" and [DONE]; a queued one an error event and [DONE]; one that
// reached it while it closed a 502/503: never a hang or a cut stream) while every request sent
// after it exited completes on the other (issue 15, docs/SCALING.md).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "e2e/cli_util.h"
#include "e2e/server_util.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string find_nginx() {
  for (const char* p : {"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

/// A loopback port nothing listens on right now.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, (sockaddr*)&a, sizeof a) == 0 && getsockname(fd, (sockaddr*)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t k = s.find(from); k != std::string::npos; k = s.find(from, k + to.size()))
    s.replace(k, from.size(), to);
  return s;
}

/// nginx (master + one worker) in the foreground on `port`, proxying to the two replicas with
/// deploy/nginx/perfx.conf; stopped (SIGQUIT, then SIGKILL after 5 s) and its directory removed
/// when destroyed. The child dies with the test process (PR_SET_PDEATHSIG).
class Nginx {
 public:
  Nginx(const std::string& bin, int port, int a, int b) {
    dir_ = make_temp_dir("nginx");
    std::ifstream in(source_dir() + "/deploy/nginx/perfx.conf");
    std::stringstream conf;
    conf << in.rdbuf();
    std::string site = conf.str();
    site = replace_all(site, "127.0.0.1:8081", "127.0.0.1:" + std::to_string(a));
    site = replace_all(site, "127.0.0.1:8082", "127.0.0.1:" + std::to_string(b));
    site = replace_all(site, "127.0.0.1:8080", "127.0.0.1:" + std::to_string(port));
    std::ofstream(dir_ + "/perfx.conf") << site;
    std::ofstream(dir_ + "/nginx.conf")
        << "worker_processes 1;\npid " << dir_ << "/nginx.pid;\nerror_log " << dir_
        << "/error.log warn;\nevents { worker_connections 512; }\nhttp {\n  access_log " << dir_
        << "/access.log;\n  client_body_temp_path " << dir_ << "/body;\n  proxy_temp_path " << dir_
        << "/proxy;\n  fastcgi_temp_path " << dir_ << "/fastcgi;\n  uwsgi_temp_path " << dir_
        << "/uwsgi;\n  scgi_temp_path " << dir_ << "/scgi;\n  include " << dir_
        << "/perfx.conf;\n}\n";
    const std::string conf_path = dir_ + "/nginx.conf", log_path = dir_ + "/error.log";
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execl(bin.c_str(), bin.c_str(), "-p", dir_.c_str(), "-c", conf_path.c_str(), "-e",
            log_path.c_str(), "-g", "daemon off;", (char*)nullptr);
      _exit(127);
    }
    // Ready: the master still runs and /health through it is perfx's answer, from nginx.
    for (int i = 0; i < 100 && !ready_; ++i) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;  // exited (a bad config, the port taken)
        return;
      }
      const HttpResponse h = http_request(port, "GET", "/health", "", {}, 5);
      std::string hdr = h.headers;
      for (auto& c : hdr) c = (char)std::tolower((unsigned char)c);
      ready_ = h.status == 200 && hdr.find("server: nginx") != std::string::npos &&
               h.body.find("\"ok\"") != std::string::npos;
      if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Nginx() {
    if (pid_ > 0) {
      kill(pid_, SIGQUIT);
      int st = 0;
      bool gone = false;
      for (int i = 0; i < 100 && !gone; ++i) {
        gone = waitpid(pid_, &st, WNOHANG) == pid_;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!gone) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ready() const { return ready_; }
  std::string error_log() const {
    std::ifstream in(dir_ + "/error.log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string dir_;
  int pid_ = -1;
  bool ready_ = false;
};

struct Outcome {
  int status = 0;
  bool done = false;  // [DONE] arrived
  bool timed_out = false;
  std::string finish;
  std::string error;  // an in-stream error event's message
  int tokens = 0;
  double start_s = 0;  // since the run began
  double end_s = 0;    // when the response (or its failure) had fully arrived
};

Outcome stream_through(int port, int i, int max_tokens, Clock::time_point t0) {
  Outcome o;
  o.start_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const json req = {{"prompt", "Once upon a time " + std::to_string(i)},
                    {"max_tokens", max_tokens},
                    {"ignore_eos", true},
                    {"temperature", 0},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
  const HttpResponse r = http_request(port, "POST", "/v1/completions", req.dump(), {}, 60);
  o.end_s = std::chrono::duration<double>(Clock::now() - t0).count();
  o.status = r.status;
  o.timed_out = r.timed_out;
  if (r.status != 200) return o;
  for (const auto& d : sse_payloads(r.body)) {
    if (d == "[DONE]") {
      o.done = true;
      continue;
    }
    const json c = json::parse(d, nullptr, false);
    if (c.is_discarded()) continue;
    if (c.contains("error")) o.error = c["error"].dump();
    if (c.contains("usage") && !c["usage"].is_null())
      o.tokens = c["usage"]["completion_tokens"].get<int>();
    if (c.contains("choices"))
      for (const auto& ch : c["choices"])
        if (ch.contains("finish_reason") && ch["finish_reason"].is_string())
          o.finish = ch["finish_reason"].get<std::string>();
  }
  return o;
}

/// Completed requests (finish_reason "length") a replica has served, from its /metrics.
double served(int port) {
  const HttpResponse m = http_request(port, "GET", "/metrics");
  const std::string key = "perfx_requests_total{finish_reason=\"length\"} ";
  const size_t k = m.body.find(key);
  return k == std::string::npos ? 0.0 : std::atof(m.body.c_str() + k + key.size());
}

TEST(Replicas, NginxSpreadsStreamsAndSurvivesAReplicaStopping) {
  REQUIRE_DEFAULT_MODEL();
  const std::string nginx = find_nginx();
  if (nginx.empty()) {
    if (fixtures_required()) GTEST_FAIL() << "nginx is not installed (PERFX_REQUIRE_FIXTURES=1)";
    GTEST_SKIP() << "nginx is not installed (scripts/install-e2e-deps.sh installs Debian's)";
  }
  const std::string args = "-m " + sh_quote(default_model()) + " --max-batch 16 -t 1";
  ServerProcess a(args), b(args);
  ASSERT_TRUE(a.ok()) << a.log();
  ASSERT_TRUE(b.ok()) << b.log();
  const int port = free_port();
  ASSERT_GT(port, 0);
  Nginx lb(nginx, port, a.port(), b.port());
  ASSERT_TRUE(lb.ready()) << lb.error_log();

  // 1. 64 streams through the balancer, 8 at a time: all complete, and both replicas serve some.
  constexpr int kN = 64, kClients = 8, kTokens = 24;
  {
    std::vector<Outcome> out(kN);
    std::atomic<int> next{0};
    const auto t0 = Clock::now();
    std::vector<std::thread> th;
    for (int c = 0; c < kClients; ++c)
      th.emplace_back([&] {
        for (int i; (i = next++) < kN;) out[(size_t)i] = stream_through(port, i, kTokens, t0);
      });
    for (auto& t : th) t.join();
    for (int i = 0; i < kN; ++i) {
      const Outcome& o = out[(size_t)i];
      EXPECT_TRUE(o.status == 200 && o.done && o.finish == "length" && o.tokens == kTokens)
          << "request " << i << ": status " << o.status << " finish '" << o.finish << "' tokens "
          << o.tokens;
    }
    const double na = served(a.port()), nb = served(b.port());
    std::printf("[ perfx ] 64 streams through nginx: replica A served %.0f, B %.0f\n", na, nb);
    EXPECT_EQ(na + nb, kN);
    EXPECT_GE(na, 8) << "least_conn should spread 8 concurrent clients over both replicas";
    EXPECT_GE(nb, 8);
  }

  // 2. Replica A stops (SIGTERM) while 8 clients stream longer generations through the balancer.
  {
    constexpr int kM = 64, kLong = 96;
    std::vector<Outcome> out(kM);
    std::atomic<int> next{0};
    const auto t0 = Clock::now();
    std::vector<std::thread> th;
    for (int c = 0; c < kClients; ++c)
      th.emplace_back([&] {
        for (int i; (i = next++) < kM;) out[(size_t)i] = stream_through(port, 100 + i, kLong, t0);
      });
    while (next.load() < 12) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // streams in flight on both
    const double stop_s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(a.stop(), 0) << a.log();
    const double gone_s = std::chrono::duration<double>(Clock::now() - t0).count();  // A exited
    for (auto& t : th) t.join();
    int completed = 0, aborted = 0, refused = 0, after = 0;
    for (int i = 0; i < kM; ++i) {
      const Outcome& o = out[(size_t)i];
      // In flight while A stopped: sent before A exited, still open when the stop began. (A
      // start-time window alone misjudged a slow machine, where a stream sent at 0 s was still
      // running on A at the 2.15 s stop and its clean abort was counted as a cut stream.)
      const bool near_stop = o.start_s <= gone_s && o.end_s >= stop_s;
      if (o.status == 200 && o.done && o.finish == "length" && o.tokens == kLong) {
        ++completed;
      } else if (o.status == 200 && o.done && (o.finish == "abort" || !o.error.empty()) &&
                 near_stop) {
        ++aborted;  // running (abort) or queued (error event) on A when it stopped: a clean end
      } else if ((o.status == 502 || o.status == 503) && near_stop) {
        ++refused;  // reached A as it closed: a clear error from the balancer
      } else {
        ADD_FAILURE() << "request " << i << " (started " << o.start_s << " s, ended " << o.end_s
                      << " s, stop at " << stop_s << " s): status " << o.status << " done "
                      << o.done << " finish '" << o.finish << "' tokens " << o.tokens << " error "
                      << o.error
                      << (o.timed_out ? " (timed out: a hung stream)" : " (a cut stream)");
      }
      // Sent after A exited: the balancer must route it to B.
      if (o.start_s > gone_s) {
        ++after;
        EXPECT_TRUE(o.status == 200 && o.done && o.finish == "length" && o.tokens == kLong)
            << "request " << i << " sent " << o.start_s - gone_s << " s after A exited: status "
            << o.status << " finish '" << o.finish << "'";
      }
    }
    std::printf(
        "[ perfx ] replica A stopped at %.2f s (exited at %.2f s): %d completed, %d ended "
        "cleanly by the stop, %d refused (of %d; %d sent after A exited)\n",
        stop_s, gone_s, completed, aborted, refused, kM, after);
    // Each client has one request in flight; only those on A (or sent to A while it shut down)
    // may end early.
    EXPECT_GE(completed, kM - 2 * kClients);
    EXPECT_GE(aborted + refused, 1) << "no stream was in flight on A when it stopped";
    EXPECT_GT(after, 0) << "no request was sent after A exited";
  }
  EXPECT_EQ(b.stop(), 0) << b.log();
}

}  // namespace
}  // namespace perfx::test
