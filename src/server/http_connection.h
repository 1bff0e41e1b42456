// cpp-httplib with connection awareness. httplib 0.11 gives handlers no way to learn that the
// client went away while a long generation runs; this server runs each connection itself (same
// keep-alive loop as httplib's) over a socket stream it owns, so a handler can ask whether its
// client is still connected and cancel the generation within one scheduler step.
#pragma once

#include "server/httplib_config.h"

namespace perfx::server {

class ConnectionAwareServer : public httplib::Server {
 private:
  // Called by httplib's accept loop (virtual in httplib::Server) for every accepted connection.
  bool process_and_close_socket(socket_t sock) override;
};

/// The socket of the connection whose request this thread is handling; -1 outside a handler.
int current_client_socket();

/// True while the peer of `fd` has not closed the connection (a pending request body or a
/// pipelined request does not count as closed).
bool client_connected(int fd);

}  // namespace perfx::server
