// Connection handling for the HTTP server (see http_connection.h).
#include "server/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace perfx::server {
namespace {

thread_local int t_client_socket = -1;

std::string ip_of(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  }
  return buf;
}

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

int wait_fd(int fd, short events, time_t sec, time_t usec) {
  pollfd p{fd, events, 0};
  const int ms = (int)(sec * 1000 + usec / 1000);
  int r;
  do {
    r = poll(&p, 1, ms);
  } while (r < 0 && errno == EINTR);
  if (r > 0 && (p.revents & (POLLERR | POLLNVAL))) return -1;
  return r;
}

// Lower-case ASCII.
std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
  return s;
}

// A blocking socket stream with a small read buffer (httplib reads request lines byte by byte).
// It also reads each request's header block ahead and gives a body-carrying method without
// Content-Length or Transfer-Encoding "Content-Length: 0": such a request has no body (RFC 9112
// §6.3), but httplib 0.11 would read one until the connection closes (`curl -X POST` with no
// data waited for the 30 s read timeout).
class SocketStream : public httplib::Stream {
 public:
  SocketStream(int fd, time_t rs, time_t ru, time_t ws, time_t wu)
      : fd_(fd), read_sec_(rs), read_usec_(ru), write_sec_(ws), write_usec_(wu) {}

  /// The next read() starts a request.
  void begin_request() { at_request_ = true; }
  /// Bytes already read from the socket and not yet consumed (a pipelined request).
  bool has_pending() const { return off_ < pending_.size(); }

  bool is_readable() const override {
    return off_ < pending_.size() || wait_fd(fd_, POLLIN, read_sec_, read_usec_) > 0;
  }
  bool is_writable() const override {
    return client_connected(fd_) && wait_fd(fd_, POLLOUT, write_sec_, write_usec_) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (at_request_) {
      at_request_ = false;
      read_header_block();
    }
    if (off_ < pending_.size()) {
      size_t n = std::min(size, pending_.size() - off_);
      std::memcpy(ptr, pending_.data() + off_, n);
      off_ += n;
      if (off_ == pending_.size()) {
        pending_.clear();
        off_ = 0;
      }
      return (ssize_t)n;
    }
    if (wait_fd(fd_, POLLIN, read_sec_, read_usec_) <= 0) return -1;
    if (size >= sizeof buf_) return recv_some(ptr, size);
    ssize_t n = recv_some(buf_, sizeof buf_);
    if (n <= 0) return n;
    const size_t k = std::min(size, (size_t)n);
    std::memcpy(ptr, buf_, k);
    pending_.assign(buf_ + k, (size_t)n - k);
    off_ = 0;
    return (ssize_t)k;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (wait_fd(fd_, POLLOUT, write_sec_, write_usec_) <= 0) return -1;
    ssize_t n;
    do {
      n = send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      ip = ip_of(a);
      port = port_of(a);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      ip = ip_of(a);
      port = port_of(a);
    }
  }
  socket_t socket() const override { return fd_; }

 private:
  ssize_t recv_some(char* p, size_t n) {
    ssize_t r;
    do {
      r = recv(fd_, p, n, 0);
    } while (r < 0 && errno == EINTR);
    return r;
  }

  // Reads until the end of the header block is buffered (or 64 KiB, EOF, the read timeout; httplib
  // then reports the error), and adds "Content-Length: 0" where the request has no body framing.
  void read_header_block() {
    constexpr size_t kMaxHead = 64 * 1024;
    while (pending_.find("\r\n\r\n", off_) == std::string::npos &&
           pending_.size() - off_ < kMaxHead) {
      if (wait_fd(fd_, POLLIN, read_sec_, read_usec_) <= 0) return;
      ssize_t n = recv_some(buf_, sizeof buf_);
      if (n <= 0) return;
      pending_.append(buf_, (size_t)n);
    }
    const size_t end = pending_.find("\r\n\r\n", off_);
    if (end == std::string::npos) return;
    size_t line = pending_.find_first_not_of("\r\n", off_);  // (stray CRLFs before a request)
    const std::string method = pending_.substr(line, pending_.find(' ', line) - line);
    if (method != "POST" && method != "PUT" && method != "PATCH" && method != "DELETE") return;
    for (line = pending_.find("\r\n", line) + 2; line < end + 2;
         line = pending_.find("\r\n", line) + 2) {
      const std::string name = lower(pending_.substr(line, pending_.find(':', line) - line));
      if (name == "content-length" || name == "transfer-encoding") return;
    }
    pending_.insert(end + 2, "Content-Length: 0\r\n");
  }

  int fd_;
  time_t read_sec_, read_usec_, write_sec_, write_usec_;
  char buf_[4096];
  std::string pending_;  // bytes read from the socket and not yet returned, from off_
  size_t off_ = 0;
  bool at_request_ = false;
};

}  // namespace

int current_client_socket() {
  return t_client_socket;
}

bool client_connected(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int r = poll(&p, 1, 0);
  if (r < 0) return errno == EINTR;
  if (r == 0) return true;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) return false;
  if (p.revents & POLLIN) {  // data, or EOF: peek to tell them apart
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
  return true;
}

bool ConnectionAwareServer::process_and_close_socket(socket_t sock) {
  SocketStream strm(sock, read_timeout_sec_, read_timeout_usec_, write_timeout_sec_,
                    write_timeout_usec_);
  t_client_socket = sock;
  bool ret = false;
  size_t count = keep_alive_max_count_;
  while (count > 0) {
    // Wait (in short slices, so that stop() is noticed) for the next request on this connection.
    bool readable = false;
    for (time_t waited_ms = 0; waited_ms <= keep_alive_timeout_sec_ * 1000; waited_ms += 50) {
      // stop() closes the listening socket at once (is_running() stays true until every
      // connection thread has returned), so an idle keep-alive connection ends within 50 ms.
      if (!is_running() || svr_sock_ == INVALID_SOCKET) break;
      if (strm.has_pending()) {
        readable = true;
        break;
      }
      int r = wait_fd(sock, POLLIN, 0, 50000);
      if (r < 0) break;
      if (r > 0) {
        readable = true;
        break;
      }
    }
    if (!readable) break;
    bool connection_closed = false;
    strm.begin_request();
    ret = process_request(strm, count == 1, connection_closed, [](httplib::Request&) {});
    if (!ret || connection_closed) break;
    --count;
  }
  t_client_socket = -1;
  shutdown(sock, SHUT_RDWR);
  close(sock);
  return ret;
}

}  // namespace perfx::server
