// Helpers for the server end-to-end tests: run `perfx serve` as a child process on a free loopback
// port, and a minimal HTTP/1.1 client over plain sockets (test_e2e links no HTTP library).
#pragma once

#include <string>
#include <vector>

namespace perfx::test {

/// `PERFX_BIN serve <args> --host 127.0.0.1 --port 0`, stopped (SIGTERM) when destroyed.
class ServerProcess {
 public:
  /// Starts the server and waits (up to 120 s) for its "listening on http://127.0.0.1:PORT" line.
  /// `args` are shell words. pass_host false: no --host flag (the server's default address; ok()
  /// is then false unless that default is 127.0.0.1). The environment's PERFX_TEST_SERVE_ARGS
  /// (e.g. "--device cuda") are added to every server's flags; PERFX_TEST_BIN replaces PERFX_BIN.
  explicit ServerProcess(const std::string& args, bool pass_host = true);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// What the server wrote to stderr so far.
  std::string log() const;
  /// Sends SIGTERM and waits; returns the exit status (or -1).
  int stop();

 private:
  int pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

struct HttpResponse {
  int status = 0;       // 0: no response (connection failed or closed early)
  std::string headers;  // raw header block
  std::string body;     // de-chunked
  bool timed_out = false;
};

/// One request with "Connection: close"; reads the whole response. recv_timeout_s > 0: give up
/// when nothing arrives for that long (the response so far is returned; timed_out is set).
HttpResponse http_request(int port, const std::string& method, const std::string& path,
                          const std::string& body = "",
                          const std::vector<std::string>& extra_headers = {},
                          int recv_timeout_s = 0);

/// The "data: " payloads of a server-sent-events body.
std::vector<std::string> sse_payloads(const std::string& body);

/// A connected loopback socket (or -1).
int connect_loopback(int port);

}  // namespace perfx::test
