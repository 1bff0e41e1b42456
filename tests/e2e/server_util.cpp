// Server process and HTTP client helpers for the end-to-end tests (see server_util.h).
#include "e2e/server_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "e2e/cli_util.h"

namespace perfx::test {

ServerProcess::ServerProcess(const std::string& args, bool pass_host) {
  dir_ = make_temp_dir("serve");
  int out[2];
  if (pipe(out) != 0) return;
  // PERFX_TEST_SERVE_ARGS (e.g. "--device cuda"): flags added to every server a test starts, so
  // a GPU machine runs these tests against its device.
  const char* extra = std::getenv("PERFX_TEST_SERVE_ARGS");
  const char* bin = std::getenv("PERFX_TEST_BIN");  // as run_perfx: away from the build tree
  std::string cmd = "exec ";
  cmd += bin && *bin ? bin : PERFX_BIN;
  cmd += " serve " + args;
  if (extra && *extra) cmd.append(" ").append(extra);
  cmd += (pass_host ? " --host 127.0.0.1" : "");
  cmd += " --port 0 2>" + dir_ + "/stderr </dev/null";
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && port_ == 0) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) {
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      continue;
    }
    char buf[512];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, (size_t)n);
    const std::string key = "listening on http://127.0.0.1:";
    size_t k = got.find(key);
    if (k != std::string::npos && got.find('\n', k) != std::string::npos)
      port_ = std::atoi(got.c_str() + k + key.size());
  }
  close(out[0]);  // the server writes nothing more to stdout
}

ServerProcess::~ServerProcess() {
  stop();
  std::system(("rm -rf " + dir_).c_str());
}

std::string ServerProcess::log() const {
  std::ifstream f(dir_ + "/stderr");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int ServerProcess::stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int st = 0;
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &st, 0);
  pid_ = -1;
  return -1;
}

int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

namespace {

std::string dechunk(const std::string& raw) {
  std::string out;
  size_t k = 0;
  while (k < raw.size()) {
    size_t eol = raw.find("\r\n", k);
    if (eol == std::string::npos) break;
    const size_t n = std::strtoul(raw.substr(k, eol - k).c_str(), nullptr, 16);
    if (n == 0) break;
    out += raw.substr(eol + 2, n);
    k = eol + 2 + n + 2;
  }
  return out;
}

}  // namespace

HttpResponse http_request(int port, const std::string& method, const std::string& path,
                          const std::string& body, const std::vector<std::string>& extra_headers,
                          int recv_timeout_s) {
  HttpResponse r;
  int fd = connect_loopback(port);
  if (fd < 0) return r;
  if (recv_timeout_s > 0) {
    timeval tv{};
    tv.tv_sec = recv_timeout_s;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!body.empty() || method == "POST")
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& h : extra_headers) req += h + "\r\n";
  req += "\r\n" + body;
  size_t sent = 0;
  while (sent < req.size()) {
    ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (413) before reading everything
    sent += (size_t)n;
  }
  std::string raw;
  char buf[65536];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && recv_timeout_s > 0)
      r.timed_out = true;
    if (n <= 0) break;
    raw.append(buf, (size_t)n);
  }
  close(fd);
  const size_t hdr_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || hdr_end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.headers = raw.substr(0, hdr_end);
  r.body = raw.substr(hdr_end + 4);
  std::string lower = r.headers;
  for (auto& c : lower) c = (char)std::tolower((unsigned char)c);
  if (lower.find("transfer-encoding: chunked") != std::string::npos) r.body = dechunk(r.body);
  return r;
}

std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t k = 0;
  while (true) {
    size_t e = body.find("\n\n", k);
    if (e == std::string::npos) break;
    std::string ev = body.substr(k, e - k);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    k = e + 2;
  }
  return out;
}

}  // namespace perfx::test
