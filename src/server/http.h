// The HTTP front end: routes of the OpenAI-compatible API, /health, /metrics, /tokenize,
// /detokenize and the chat page, with API-key checks, body limits and OpenAI-shaped errors.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/completions.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace perfx::server {

/// True when `a` and `b` hold the same bytes. There is no early exit: every byte of the longer
/// string is visited whatever the contents, so the time does not depend on where the strings
/// differ. The time does depend on the lengths: the key's length is not hidden. Best effort (the
/// compiler is not bound to keep the loop branch-free). No errors.
bool constant_time_equal(std::string_view a, std::string_view b);

struct HttpOptions {
  std::string api_key;               // empty: no authentication
  size_t max_body_bytes = 4u << 20;  // larger bodies get 413
  /// Connection threads; 0: max_connections when set, else max batch + max queue + 32.
  int threads = 0;
  /// Open client connections at once (being served or idle in keep-alive); one more is answered
  /// 503 "too many connections" (naming the limit) and closed. 0: the number of threads.
  int max_connections = 0;
  int read_timeout_s = 30;           // for reading a request
  int write_timeout_s = 30;          // for a single write to a slow client
};

class HttpServer {
 public:
  HttpServer(CompletionService& service, Scheduler& scheduler, Metrics& metrics, HttpOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds host:port (port 0: any free port) without SO_REUSEPORT, so a port another server
  /// listens on is refused. Returns the bound port; throws perfx::Error "cannot listen on
  /// HOST:PORT: <reason>" (e.g. "address already in use").
  int bind(const std::string& host, int port);
  /// Serves until stop() (blocking).
  void run();
  /// Stops run(); safe from any thread (and from a signal-watching thread).
  void stop();
  /// Client connections open now (served or idle in keep-alive); also perfx_http_connections_open
  /// in /metrics.
  size_t connections_open() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perfx::server
