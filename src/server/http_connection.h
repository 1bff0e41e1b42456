// cpp-httplib with connection awareness. httplib 0.11 gives handlers no way to learn that the
// client went away while a long generation runs; this server runs each connection itself (same
// keep-alive loop as httplib's) over a socket stream it owns, so a handler can ask whether its
// client is still connected and cancel the generation within one scheduler step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "server/httplib_config.h"

namespace perfx::server {

/// A request's header block (request line and headers) larger than this gets 431.
constexpr size_t kMaxHeaderBlockBytes = 64 * 1024;
/// One header line longer than this, counted with its CRLF, gets 431 (httplib's
/// CPPHTTPLIB_HEADER_MAX_LENGTH, which httplib counts the same way).
constexpr size_t kMaxHeaderLineBytes = 8192;

class ConnectionAwareServer : public httplib::Server {
 public:
  /// Serves connections on `threads` threads and keeps at most `max_connections` (>= 1) open at
  /// once: one more is answered 503 ("too many connections", naming the limit and the flag
  /// --max-connections) and closed, instead of waiting, unbounded, for a free thread. Call before
  /// listening. Starts the threads now: throws std::system_error when one cannot be started
  /// (those already started are stopped).
  void set_connection_limits(int threads, int max_connections);
  /// Connections refused by the limit so far.
  uint64_t connections_refused() const;
  /// Client connections open now (being served or waiting for their next request).
  size_t connections_open() const { return open_->load(); }

 private:
  // Called by httplib's accept loop (virtual in httplib::Server) for every accepted connection.
  bool process_and_close_socket(socket_t sock) override;
  size_t max_connections_ = 0;
  std::unique_ptr<httplib::TaskQueue> queue_;  // started by set_connection_limits, until listening
  std::shared_ptr<std::atomic<size_t>> open_ = std::make_shared<std::atomic<size_t>>(0);
  std::shared_ptr<std::atomic<uint64_t>> refused_ = std::make_shared<std::atomic<uint64_t>>(0);
};

/// The socket of the connection whose request this thread is handling; -1 outside a handler.
int current_client_socket();

/// True while the peer of `fd` has not closed the connection (a pending request body or a
/// pipelined request does not count as closed).
bool client_connected(int fd);

}  // namespace perfx::server
