// Connection handling for the HTTP server (see http_connection.h).
#include "server/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/openai.h"

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

using Clock = std::chrono::steady_clock;

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

// `s` for an error message: at most 60 bytes, printable ASCII only (the message goes into JSON).
std::string printable(std::string s) {
  if (s.size() > 60) s = s.substr(0, 60) + "...";
  for (char& c : s)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s;
}

// True for an RFC 9110 token (a method, a header name): one or more tchars.
bool is_token(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum((unsigned char)c) && !std::strchr("!#$%&'*+-.^_`|~", c)) return false;
  return true;
}

// A request the connection answers itself, then closes: its header block is too large, or its
// framing cannot be trusted (httplib would misread it). `status` 0: none.
struct Refusal {
  int status = 0;
  const char* reason = "";
  std::string message, code;
};

// A blocking socket stream with a small read buffer (httplib reads request lines byte by byte).
// It also reads each request's header block ahead and gives a body-carrying method without
// Content-Length or Transfer-Encoding "Content-Length: 0": such a request has no body (RFC 9112
// §6.3), but httplib 0.11 would read one until the connection closes (`curl -X POST` with no
// data waited for the 30 s read timeout).
class SocketStream : public httplib::Stream {
 public:
  SocketStream(int fd, time_t rs, time_t ru, time_t ws, time_t wu, size_t max_body,
               std::function<bool()> stopping)
      : fd_(fd),
        read_sec_(rs),
        read_usec_(ru),
        write_sec_(ws),
        write_usec_(wu),
        max_body_(max_body),
        stopping_(std::move(stopping)) {}

  /// The next request starts: reads its header block ahead and checks it. Returns false when the
  /// connection is to be dropped without an answer (the server is stopping, or the whole block did
  /// not arrive within the read timeout); else true, with `refusal` the answer to give before
  /// closing (431 for a block too large, 400/501/505 for a request line httplib cannot parse), or
  /// status 0 when httplib is to serve the request.
  bool begin_request(Refusal& refusal) { return read_header_block(refusal); }
  /// Bytes already read from the socket and not yet consumed (a pipelined request).
  bool has_pending() const { return off_ < pending_.size(); }
  /// The request's Content-Length is over the body limit: httplib was given no body (it answers
  /// 413) and the connection is to close, its unread body drained (drain_and_close).
  bool body_refused() const { return body_refused_; }

  bool is_readable() const override {
    return off_ < pending_.size() || wait_readable_until(read_deadline()) > 0;
  }
  bool is_writable() const override {
    return client_connected(fd_) && wait_fd(fd_, POLLOUT, write_sec_, write_usec_) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (body_refused_) {  // the header block only: httplib's skip of the body ends at once
      if (block_left_ == 0) return -1;
      size = std::min(size, block_left_);
    }
    if (off_ < pending_.size()) {
      size_t n = std::min(size, pending_.size() - off_);
      std::memcpy(ptr, pending_.data() + off_, n);
      off_ += n;
      if (body_refused_) block_left_ -= n;
      if (off_ == pending_.size()) {
        pending_.clear();
        off_ = 0;
      }
      return (ssize_t)n;
    }
    // A request body's next bytes: stop() ends the wait within 50 ms, not at the read timeout.
    if (wait_readable_until(read_deadline()) <= 0) return -1;  // no input, or the server stops
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
    // A read that stop() ended leaves an unfinished request: httplib would answer it 400; the
    // connection is dropped unanswered instead, as one whose header block stop() ended.
    if (stopped_) return -1;
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

  // Waits up to `deadline` for input, in slices of 50 ms so that stop() is noticed (then sets
  // stopped_). Returns > 0 when readable (input already waiting counts, even at a zero timeout),
  // 0 at the deadline or when stopping, < 0 on a socket error.
  int wait_readable_until(Clock::time_point deadline) const {
    while (true) {
      if (stopping_ && stopping_()) {
        stopped_ = true;
        return 0;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
      const int r = wait_fd(fd_, POLLIN, 0, std::clamp<long long>(left.count(), 0, 50000));
      if (r != 0 || left.count() <= 0) return r;
    }
  }

  // One read timeout from now.
  Clock::time_point read_deadline() const {
    return Clock::now() + std::chrono::seconds(read_sec_) + std::chrono::microseconds(read_usec_);
  }

  // Finds the header block buffered from off_: `start` is its request line (after any stray empty
  // lines, RFC 9112 §2.2), `end` just past the empty line that ends it. A line ends at LF, with
  // or without CR before it (a bare LF is a line terminator, RFC 9112 §2.2, as nginx takes it).
  // False while the block is incomplete.
  bool find_header_block(size_t& start, size_t& end) const {
    start = pending_.find_first_not_of("\r\n", off_);
    if (start == std::string::npos) return false;
    for (size_t line = start, lf; (lf = pending_.find('\n', line)) != std::string::npos;
         line = lf + 1) {
      if (lf == line || (lf == line + 1 && pending_[line] == '\r')) {
        end = lf + 1;
        return true;
      }
    }
    return false;
  }

  // Reads until the end of the header block is buffered, ends each of its lines with CRLF (httplib
  // takes only CRLF), and adds "Content-Length: 0" where the request has no body framing. The
  // whole block must arrive within one read timeout (a client trickling bytes cannot hold the
  // connection longer) and stop() ends the wait within 50 ms: then returns false (drop the
  // connection). At EOF or a socket error returns true with what was read (httplib then reports
  // the error). Sets `refusal` when the block exceeds kMaxHeaderBlockBytes or one header line
  // kMaxHeaderLineBytes (431), or check_request() refuses it.
  bool read_header_block(Refusal& refusal) {
    refusal = Refusal();
    const auto deadline = read_deadline();
    size_t start = 0, end = 0;
    while (!find_header_block(start, end)) {
      if (pending_.size() - off_ > kMaxHeaderBlockBytes) {
        refusal = too_large_block();
        return true;
      }
      const int r = wait_readable_until(deadline);
      if (r == 0) return false;
      if (r < 0) return true;
      ssize_t n = recv_some(buf_, sizeof buf_);
      if (n <= 0) return true;
      pending_.append(buf_, (size_t)n);
    }
    // A stray CRLF would be taken for the request line by httplib.
    std::string block;
    for (size_t line = start, lf; line < end; line = lf + 1) {
      lf = pending_.find('\n', line);
      block.append(pending_, line, lf - line - (lf > line && pending_[lf - 1] == '\r'));
      block += "\r\n";
    }
    pending_.replace(off_, end - off_, block);
    start = off_;
    end = off_ + block.size();  // just past the CRLF of the empty line
    if (end - off_ > kMaxHeaderBlockBytes) {
      refusal = too_large_block();
      return true;
    }
    const size_t first = pending_.find("\r\n", start);  // the end of the request line
    for (size_t line = first + 2; line < end - 2;) {    // header lines (the request line: 414)
      const size_t next = pending_.find("\r\n", line);
      // Counted with its CRLF, as httplib's read_headers() counts it (it answers a bare 400 to a
      // line over CPPHTTPLIB_HEADER_MAX_LENGTH): every line it would refuse gets this 431.
      if (next + 2 - line > kMaxHeaderLineBytes) {
        std::string name = pending_.substr(line, std::min(next, pending_.find(':', line)) - line);
        if (name.size() > 40) name = name.substr(0, 40) + "...";
        refusal = too_large_block();
        refusal.message = "The request header line '" + printable(name) + ": ...' is " +
                          std::to_string(next + 2 - line) + " bytes with its CRLF; the limit is " +
                          std::to_string(kMaxHeaderLineBytes) + " bytes per line.";
        return true;
      }
      line = next + 2;
    }
    if (!check_request_line(pending_.substr(start, first - start), refusal)) return true;
    check_body_framing(first, end, refusal);
    return true;
  }

  // Checks the headers that frame the body of the request whose request line ends at `first` and
  // whose header block at `end`, where httplib would misread them (RFC 9112 §6.3): it ignores a
  // header named with white space before the colon ("Content-Length : 5"), takes the first of two
  // different Content-Length values, lets Transfer-Encoding win over Content-Length, reads
  // Content-Length with strtoull ("-5" is 2^64 - 5, "abc" 0), reads no body of a GET, and skips a
  // body over the limit before answering 413 (5 GB announced: the read timeout). Each but the last
  // is refused (`refusal`: 400, or 501 for a transfer coding other than chunked): the body's
  // length is unknown or ambiguous. A body over the limit is not read: body_refused_ is set and
  // "Connection: close" added, so that httplib answers 413 at once (read() gives it no body) and
  // the connection closes after it. A body method with no framing gets "Content-Length: 0".
  void check_body_framing(size_t first, size_t end, Refusal& refusal) {
    bool has_length = false, has_te = false;
    uint64_t length = 0;
    std::string length_text, te;
    std::vector<size_t> expect_at;  // where each Expect header's name starts
    for (size_t line = first + 2, next; line < end - 2; line = next + 2) {
      next = pending_.find("\r\n", line);
      const size_t colon = std::min(next, pending_.find(':', line));
      const std::string name = pending_.substr(line, colon - line);
      if (colon == next || !is_token(name)) {  // obs-fold too (a line starting with white space)
        refusal = {400, "Bad Request",
                   "Malformed header line '" + printable(pending_.substr(line, next - line)) +
                       "': expected Name: value, with no white space before the colon.",
                   "invalid_header"};
        return;
      }
      const std::string key = lower(name);
      if (key == "expect") expect_at.push_back(line);
      if (key != "content-length" && key != "transfer-encoding") continue;
      size_t b = colon + 1, e = next;  // the value, without white space around it
      while (b < e && (pending_[b] == ' ' || pending_[b] == '\t')) ++b;
      while (e > b && (pending_[e - 1] == ' ' || pending_[e - 1] == '\t')) --e;
      const std::string value = pending_.substr(b, e - b);
      if (key == "transfer-encoding") {
        te += (has_te ? ", " : "") + value;
        has_te = true;
        continue;
      }
      if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) {
        refusal = {400, "Bad Request",
                   "The Content-Length header '" + printable(value) +
                       "' is not a non-negative decimal integer.",
                   "invalid_content_length"};
        return;
      }
      uint64_t v = 0;  // saturates: any value this large is over the limit
      for (char c : value)
        v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t)(c - '0');
      if (has_length && v != length) {
        refusal = {400, "Bad Request",
                   "Conflicting Content-Length headers (" + length_text + " and " +
                       printable(value) + "): the body's length is ambiguous.",
                   "conflicting_content_length"};
        return;
      }
      has_length = true;
      length = v;
      length_text = printable(value);
    }
    if (has_length && has_te) {
      refusal = {400, "Bad Request",
                 "The request has both Content-Length and Transfer-Encoding headers: the body's "
                 "length is ambiguous; send one of them.",
                 "conflicting_content_length"};
      return;
    }
    if (has_te && lower(te) != "chunked") {
      refusal = {501, "Not Implemented",
                 "Transfer-Encoding '" + printable(te) + "' is not supported; only chunked is.",
                 "unsupported_transfer_encoding"};
      return;
    }
    const std::string method = pending_.substr(off_, pending_.find(' ', off_) - off_);
    if (method != "POST" && method != "PUT" && method != "PATCH" && method != "DELETE" &&
        method != "PRI") {  // the methods whose body httplib reads
      if (has_te || length > 0) {
        refusal = {400, "Bad Request",
                   "A " + method + " request with a body (" +
                       (has_te ? "Transfer-Encoding: " + printable(te)
                               : "Content-Length: " + length_text) +
                       ") is not supported.",
                   "unexpected_body"};
      }
      return;
    }
    if (!has_length && !has_te) {
      pending_.insert(end - 2, "Content-Length: 0\r\n");
    } else if (has_length && length > max_body_) {
      // httplib answers "Expect: 100-continue" with 100 Continue before it routes, inviting the
      // upload of a body that will be refused: renamed in place (same length), it is not seen, and
      // the 413 comes first (RFC 9110 §10.1.1 allows a final status instead of 100).
      for (size_t at : expect_at) pending_[at] = 'X';     // "Expect" -> "Xxpect"
      const std::string close = "Connection: close\r\n";  // first: httplib reads the first
      pending_.insert(first + 2, close);
      body_refused_ = true;
      block_left_ = end + close.size() - off_;
    }
  }

  // A request line httplib cannot parse (it answers 400 and then reads each header line as a
  // request of its own): false, with `refusal` 400 for a malformed line, 501 for a method httplib
  // does not know, 505 for an HTTP version other than 1.0 and 1.1.
  static bool check_request_line(const std::string& line, Refusal& refusal) {
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
    const std::string method = line.substr(0, sp1);
    const std::string version = sp2 == std::string::npos ? "" : line.substr(sp2 + 1);
    const bool version_ok = version.size() == 8 && version.compare(0, 5, "HTTP/") == 0 &&
                            std::isdigit((unsigned char)version[5]) && version[6] == '.' &&
                            std::isdigit((unsigned char)version[7]);
    if (sp2 == sp1 + 1 || !is_token(method) || !version_ok) {  // sp2 npos too
      refusal = {400, "Bad Request",
                 "Malformed request line '" + printable(line) +
                     "': expected METHOD TARGET HTTP/1.1, separated by single spaces.",
                 "invalid_request_line"};
      return false;
    }
    static const char* const kMethods[] = {"GET",     "HEAD",    "POST",  "PUT",   "DELETE",
                                           "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"};
    if (std::find(std::begin(kMethods), std::end(kMethods), method) == std::end(kMethods)) {
      refusal = {501, "Not Implemented",
                 "The method '" + printable(method) + "' is not implemented by this server.",
                 "method_not_implemented"};
      return false;
    }
    if (version != "HTTP/1.1" && version != "HTTP/1.0") {
      refusal = {505, "HTTP Version Not Supported",
                 "The HTTP version '" + version + "' is not supported; use HTTP/1.1 (or 1.0).",
                 "http_version_not_supported"};
      return false;
    }
    return true;
  }

  static Refusal too_large_block() {
    return {431, "Request Header Fields Too Large",
            "The request's header block exceeds the limit of " +
                std::to_string(kMaxHeaderBlockBytes / 1024) + " KiB (request line and headers).",
            "request_header_fields_too_large"};
  }

  int fd_;
  time_t read_sec_, read_usec_, write_sec_, write_usec_;
  size_t max_body_;                 // a larger Content-Length gets 413 without reading the body
  std::function<bool()> stopping_;  // true once the server stops
  bool body_refused_ = false;       // see body_refused()
  size_t block_left_ = 0;           // while body_refused_: header block bytes not yet read
  mutable bool stopped_ = false;    // a read gave up because the server stops
  char buf_[4096];
  std::string pending_;  // bytes read from the socket and not yet returned, from off_
  size_t off_ = 0;
};

// Half-closes `fd` and reads and drops what the client still sends, then closes it: closing with
// unread input would reset the connection, and the client could lose the response it has not read
// yet. The drain ends at the client's EOF, after `idle` without input, after `total`, or when
// `stopping` (if set) says the server stops.
void drain_and_close(int fd, Clock::duration idle, Clock::duration total,
                     const std::function<bool()>& stopping = nullptr) {
  shutdown(fd, SHUT_WR);
  char buf[16384];
  const auto deadline = Clock::now() + total;
  auto quiet_until = Clock::now() + idle;
  while (!(stopping && stopping())) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        std::min(deadline, quiet_until) - Clock::now());
    if (left.count() <= 0) break;
    const int r = wait_fd(fd, POLLIN, 0, std::min<long long>(left.count(), 50000));
    if (r < 0) break;
    if (r == 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) break;
    quiet_until = Clock::now() + idle;
  }
  close(fd);
}

// Writes a complete error response ("Connection: close") on `fd`, then closes it with a short
// drain: it ends after 50 ms without input and at most 100 ms in all (a client trickling bytes
// cannot hold the refusing thread, or a stopping server, longer).
void answer_and_close(int fd, int status, const char* reason, const ApiError& e) {
  const std::string body = e.body();
  const std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                           "\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  const std::string all = head + body;
  size_t sent = 0;
  while (sent < all.size()) {
    if (wait_fd(fd, POLLOUT, 1, 0) <= 0) break;
    const ssize_t n = send(fd, all.data() + sent, all.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += (size_t)n;
  }
  drain_and_close(fd, std::chrono::milliseconds(50), std::chrono::milliseconds(100));
}

// Set on the thread that refuses connections over the limit; t_refuse_silently when the server is
// stopping, or when so many wait to be refused that answering each (50 ms for an idle client, at
// most 100 ms) would let them pile up.
thread_local bool t_refuse = false;
thread_local bool t_refuse_silently = false;
constexpr size_t kMaxRefusalsQueued = 64;

// A thread pool like httplib's ThreadPool (which terminates the process when a thread cannot be
// started: this one throws) behind a bound on open connections: the accept loop enqueues one task
// per connection; a task beyond the bound runs on one refusing thread (t_refuse), which answers 503.
class LimitedTaskQueue : public httplib::TaskQueue {
 public:
  /// Starts `threads` connection threads and the refusing thread; throws std::system_error (after
  /// stopping those already started) when one cannot be started.
  LimitedTaskQueue(size_t threads, size_t max_connections,
                   std::shared_ptr<std::atomic<size_t>> open)
      : max_(max_connections), open_(std::move(open)) {
    try {
      workers_.reserve(threads);
      for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work_loop(); });
      refuser_ = std::thread([this] { refuse_loop(); });
    } catch (...) {
      shutdown();
      throw;
    }
  }
  ~LimitedTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    if (open_->fetch_add(1) >= max_) {
      (*open_)--;
      std::lock_guard<std::mutex> lk(mu_);
      refuse_.push_back(std::move(fn));
      refuse_cv_.notify_one();
      return;
    }
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back([open = open_, fn = std::move(fn)] {
      struct Closed {  // the connection is no longer open, however fn() ends
        std::atomic<size_t>& open;
        ~Closed() { open--; }
      } closed{*open};
      fn();
    });
    jobs_cv_.notify_one();
  }

  /// Queued connections are still served (or refused, silently), as by httplib's ThreadPool.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) return;
      stopping_ = true;
      jobs_cv_.notify_all();
      refuse_cv_.notify_all();
    }
    if (refuser_.joinable()) refuser_.join();
    for (std::thread& t : workers_)
      if (t.joinable()) t.join();
  }

 private:
  void work_loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      jobs_cv_.wait(lk, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lk.unlock();
      fn();  // process_and_close_socket, which lets no exception out
      lk.lock();
    }
  }

  void refuse_loop() {
    t_refuse = true;
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      refuse_cv_.wait(lk, [this] { return stopping_ || !refuse_.empty(); });
      if (refuse_.empty()) return;
      std::function<void()> fn = std::move(refuse_.front());
      refuse_.pop_front();
      t_refuse_silently = stopping_ || refuse_.size() >= kMaxRefusalsQueued;
      lk.unlock();
      fn();  // process_and_close_socket on this thread: answers 503 (or closes)
      lk.lock();
    }
  }

  const size_t max_;
  std::shared_ptr<std::atomic<size_t>> open_;  // shared with the server (connections_open)
  std::mutex mu_;
  std::condition_variable jobs_cv_, refuse_cv_;
  std::deque<std::function<void()>> jobs_;    // connections to serve
  std::deque<std::function<void()>> refuse_;  // connections to refuse
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  std::thread refuser_;
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

void ConnectionAwareServer::set_connection_limits(int threads, int max_connections) {
  const size_t t = (size_t)std::max(1, threads), m = (size_t)std::max(1, max_connections);
  // The threads start now, so that a failure is reported before the server listens (and not by
  // httplib's listen loop, or as std::terminate). The first listen takes this queue; a later one
  // (after stop()) makes a new one.
  queue_.reset();
  queue_ = std::make_unique<LimitedTaskQueue>(t, m, open_);
  new_task_queue = [this, t, m]() -> httplib::TaskQueue* {
    if (queue_) return queue_.release();
    return new LimitedTaskQueue(t, m, open_);
  };
  max_connections_ = m;
}

uint64_t ConnectionAwareServer::connections_refused() const {
  return refused_->load();
}

bool ConnectionAwareServer::process_and_close_socket(socket_t sock) {
  // stop() closes the listening socket at once (is_running() stays true until every connection
  // thread has returned).
  const auto stopping = [this] { return !is_running() || svr_sock_ == INVALID_SOCKET; };
  bool ret = false, closed = false;
  // An exception here (outside httplib's handler guard) would end the thread and with it the
  // process (std::terminate): drop this connection instead.
  try {
    if (t_refuse) {
      (*refused_)++;
      if (t_refuse_silently || stopping()) {  // a flood, or the server is stopping: no answer
        closed = true;
        close(sock);
        return false;
      }
      const std::string n = std::to_string(max_connections_) +
                            (max_connections_ == 1 ? " client connection" : " client connections");
      answer_and_close(sock, 503, "Service Unavailable",
                       ApiError(503,
                                "Too many connections: this server keeps at most " + n +
                                    " open (perfx serve --max-connections); retry later.",
                                "server_error", "", "too_many_connections"));
      closed = true;  // answer_and_close closes last; it throws only before sending
      return false;
    }
    SocketStream strm(sock, read_timeout_sec_, read_timeout_usec_, write_timeout_sec_,
                      write_timeout_usec_, payload_max_length_, stopping);
    t_client_socket = sock;
    size_t count = keep_alive_max_count_;
    while (count > 0) {
      // Wait (in short slices, so that stop() is noticed) for the next request on this connection:
      // an idle keep-alive connection ends within 50 ms of stop().
      bool readable = false;
      for (time_t waited_ms = 0; waited_ms <= keep_alive_timeout_sec_ * 1000; waited_ms += 50) {
        if (stopping()) break;
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
      Refusal refusal;
      if (!strm.begin_request(refusal)) break;  // stopping, or the headers took too long
      if (refusal.status != 0) {  // the rest of the stream cannot be read as requests: close
        t_client_socket = -1;
        answer_and_close(
            sock, refusal.status, refusal.reason,
            ApiError(refusal.status, refusal.message, "invalid_request_error", "", refusal.code));
        closed = true;
        return false;
      }
      ret = process_request(strm, count == 1, connection_closed, [](httplib::Request&) {});
      if (strm.body_refused()) {  // answered 413 without reading the body: drain it, then close
        t_client_socket = -1;
        drain_and_close(
            sock, std::chrono::seconds(1),
            std::chrono::seconds(read_timeout_sec_) + std::chrono::microseconds(read_timeout_usec_),
            stopping);
        closed = true;
        break;
      }
      if (!ret || connection_closed) break;
      --count;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perfx serve: warning: a connection was dropped: %s\n", e.what());
    ret = false;
  } catch (...) {
    std::fprintf(stderr, "perfx serve: warning: a connection was dropped: unknown exception\n");
    ret = false;
  }
  t_client_socket = -1;
  if (!closed) {
    shutdown(sock, SHUT_RDWR);
    close(sock);
  }
  return ret;
}

}  // namespace perfx::server
