// HTTP routes (see http.h).
#include "server/http.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include "perfx/status.h"
#include "server/http_connection.h"
#include "server/web/chat_page.h"

namespace perfx::server {
namespace {

using httplib::Request;
using httplib::Response;

void send_error(Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(e.body(), "application/json");
}

void send_json(Response& res, const ojson& j) {
  res.status = 200;
  res.set_content(j.dump(), "application/json");
}

// Metric label for a path: the known routes, everything else "other" (bounded label values).
std::string route_label(const std::string& path) {
  static const char* const kRoutes[] = {
      "/",           "/health",    "/metrics",        "/tokenize",
      "/detokenize", "/v1/models", "/v1/completions", "/v1/chat/completions"};
  for (const char* r : kRoutes)
    if (path == r) return r;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited whatever the contents; a length mismatch is
  // folded into the same accumulator instead of returning early.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? (unsigned char)a[i] : 0;
    const unsigned char y = i < b.size() ? (unsigned char)b[i] : 0;
    diff |= (unsigned)(x ^ y);
  }
  // The loop has no data-dependent branch as written, but C++ promises nothing about timing: the
  // volatile only makes the compiler compute `diff` in full before the test, it does not stop it
  // from rewriting the loop. Best effort, as in most servers; not a verified constant-time
  // primitive (OpenSSL's CRYPTO_memcmp would be, but perfx does not link OpenSSL directly).
  volatile unsigned result = diff;
  return result == 0;
}

struct HttpServer::Impl {
  CompletionService& service;
  Scheduler& scheduler;
  Metrics& metrics;
  HttpOptions opts;
  ConnectionAwareServer svr;
  socket_t listen_fd = INVALID_SOCKET;  // the listening socket, seen in the socket_options hook

  Impl(CompletionService& s, Scheduler& sch, Metrics& m, HttpOptions o)
      : service(s), scheduler(sch), metrics(m), opts(std::move(o)) {}

  bool authorized(const Request& req) const {
    if (opts.api_key.empty()) return true;
    return constant_time_equal(req.get_header_value("Authorization"), "Bearer " + opts.api_key);
  }

  // Wraps a handler with the API-key check and error translation.
  httplib::Server::Handler api(bool need_key, std::function<void(const Request&, Response&)> h) {
    return [this, need_key, h = std::move(h)](const Request& req, Response& res) {
      if (need_key && !authorized(req)) {
        send_error(res, ApiError(401,
                                 "Incorrect or missing API key. Send it as 'Authorization: Bearer "
                                 "<key>'.",
                                 "invalid_request_error", "", "invalid_api_key"));
        return;
      }
      try {
        h(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, e.what(), "server_error"));
      }
    };
  }

  void completions(const Request& req, Response& res, bool chat) {
    std::shared_ptr<CompletionService::Call> call = service.start(req.body, chat);
    const int fd = current_client_socket();
    auto alive = [fd] { return fd < 0 || client_connected(fd); };
    if (!call->req.stream) {
      send_json(res, service.collect(*call, alive));
      return;
    }
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream", [this, call, alive](size_t, httplib::DataSink& sink) {
          auto write = [&sink](const std::string& s) { return sink.write(s.data(), s.size()); };
          try {
            service.stream(*call, write, alive);
          } catch (const std::exception& e) {
            call->handle->cancel();
            write("data: " + ApiError(500, e.what(), "server_error").body() + "\n\n");
          }
          sink.done();
          return true;
        });
  }

  void routes() {
    svr.Get("/", [](const Request&, Response& res) {
      res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
    });
    svr.Get("/health", [this](const Request&, Response& res) {
      send_json(res, ojson{{"status", "ok"},
                           {"model", service.model_id()},
                           {"running", scheduler.running()},
                           {"waiting", scheduler.waiting()}});
    });
    svr.Get("/metrics", [this](const Request&, Response& res) {
      std::string text = metrics.render();
      text += "# HELP perfx_http_connections_open Client connections open (served or idle).\n"
              "# TYPE perfx_http_connections_open gauge\nperfx_http_connections_open " +
              std::to_string(svr.connections_open()) +
              "\n# HELP perfx_http_connections_refused_total Connections refused because "
              "--max-connections were open (answered 503, or closed unanswered during a flood or "
              "a shutdown).\n# TYPE perfx_http_connections_refused_total "
              "counter\nperfx_http_connections_refused_total " +
              std::to_string(svr.connections_refused()) + "\n";
      res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });
    auto model_object = [this] {
      return ojson{{"id", service.model_id()},
                   {"object", "model"},
                   {"created", service.created()},
                   {"owned_by", "perfx"}};
    };
    svr.Get("/v1/models", api(true, [model_object](const Request&, Response& res) {
              send_json(res, ojson{{"object", "list"}, {"data", ojson::array({model_object()})}});
            }));
    svr.Get("/v1/models/(.+)", api(true, [this, model_object](const Request& req, Response& res) {
              const std::string id = req.matches[1];
              if (id != service.model_id())
                throw ApiError(404, "The model '" + id + "' does not exist.",
                               "invalid_request_error", "model", "model_not_found");
              send_json(res, model_object());
            }));
    for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
      svr.Post(path, api(true, [this](const Request& req, Response& res) {
                 completions(req, res, true);
               }));
    }
    for (const char* path : {"/v1/completions", "/completions"}) {
      svr.Post(path, api(true, [this](const Request& req, Response& res) {
                 completions(req, res, false);
               }));
    }
    svr.Post("/tokenize", api(true, [this](const Request& req, Response& res) {
               send_json(res, service.tokenize(parse_json_body(req.body)));
             }));
    svr.Post("/detokenize", api(true, [this](const Request& req, Response& res) {
               send_json(res, service.detokenize(parse_json_body(req.body)));
             }));
    // Known routes answer the other methods with 405 and an Allow header, not 404.
    auto not_allowed = [](const char* allow) {
      return [allow](const Request& req, Response& res) {
        send_error(res, ApiError(405, "Method " + req.method + " is not allowed for " + req.path +
                                          "; use " + allow + "."));
        res.set_header("Allow", std::string(allow) + ", OPTIONS");
      };
    };
    for (const char* path : {"/v1/chat/completions", "/chat/completions", "/v1/completions",
                             "/completions", "/tokenize", "/detokenize"}) {
      svr.Get(path, not_allowed("POST"));
      svr.Put(path, not_allowed("POST"));
      svr.Delete(path, not_allowed("POST"));
      svr.Patch(path, not_allowed("POST"));
    }
    for (const char* path : {"/", "/health", "/metrics", "/v1/models", "/v1/models/(.+)"}) {
      svr.Post(path, not_allowed("GET"));
      svr.Put(path, not_allowed("GET"));
      svr.Delete(path, not_allowed("GET"));
      svr.Patch(path, not_allowed("GET"));
    }
    svr.Options(".*", [](const Request&, Response& res) { res.status = 204; });
    svr.set_error_handler([this](const Request& req, Response& res) {
      if (res.body.empty()) {
        ApiError e = res.status == 413
                         ? ApiError(413,
                                    "Request body too large: the limit is " +
                                        std::to_string(opts.max_body_bytes) +
                                        " bytes (perfx serve --max-body-mib).",
                                    "invalid_request_error", "", "payload_too_large")
                         : error_for_status(res.status, req.path);
        res.set_content(e.body(), "application/json");
      }
    });
    svr.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, what, "server_error"));
    });
    // Counted just before the response is written (httplib calls the post-routing handler for
    // every response, errors included, once its status is final), not in the logger, which runs
    // after the write: a client could otherwise see its response before the count.
    svr.set_post_routing_handler([this](const Request& req, Response& res) {
      metrics.http_request(route_label(req.path), res.status);
    });
  }
};

HttpServer::HttpServer(CompletionService& service, Scheduler& scheduler, Metrics& metrics,
                       HttpOptions opts)
    : impl_(std::make_unique<Impl>(service, scheduler, metrics, std::move(opts))) {
  std::signal(SIGPIPE, SIG_IGN);  // writes to a closed client report an error instead
  auto& svr = impl_->svr;
  const auto& o = impl_->opts;
  int threads = o.threads;
  if (threads <= 0)
    threads = o.max_connections > 0
                  ? o.max_connections
                  : scheduler.options().max_batch + scheduler.options().max_queue + 32;
  try {
    svr.set_connection_limits(threads, o.max_connections > 0 ? o.max_connections : threads);
  } catch (const std::exception& e) {  // std::thread: the thread limit, or memory for stacks
    throw Error("cannot start " + std::to_string(threads) + " connection threads (" +
                (o.max_connections > 0 ? "--max-connections " + std::to_string(o.max_connections)
                                       : std::string("--max-connections default: max batch + max "
                                                     "queue + 32")) +
                "): " + e.what());
  }
  svr.set_payload_max_length(o.max_body_bytes);
  svr.set_keep_alive_max_count(100000);
  svr.set_keep_alive_timeout(5);
  svr.set_read_timeout(o.read_timeout_s, 0);
  svr.set_write_timeout(o.write_timeout_s, 0);
  svr.set_tcp_nodelay(true);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which lets a second server bind the
  // same port and silently share (or steal) its connections.
  svr.set_socket_options([impl = impl_.get()](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    impl->listen_fd = sock;
  });
  svr.set_default_headers({{"Access-Control-Allow-Origin", "*"},
                           {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
                           {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"}});
  impl_->routes();
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind(const std::string& host, int port) {
  check(port >= 0 && port <= 65535, "--port must be 0..65535, got " + std::to_string(port));
  errno = 0;
  const int bound = port == 0 ? impl_->svr.bind_to_any_port(host)
                              : (impl_->svr.bind_to_port(host, port) ? port : -1);
  if (bound > 0) {
    // Debian's libcpp-httplib listens with a backlog of 5: a burst of clients (64 at once) then
    // overflows the accept queue, the kernel drops their SYNs and they retry after 1 s (seen as
    // TTFT p99 ≈ 1.05 s). listen() again on a listening socket only changes its backlog.
    if (impl_->listen_fd != INVALID_SOCKET) ::listen(impl_->listen_fd, SOMAXCONN);
    return bound;
  }
  // httplib reports only failure; errno is still what bind() or listen() set.
  const int err = errno;
  std::string why;
  if (err == EADDRINUSE)
    why = "address already in use";
  else if (err == EADDRNOTAVAIL)
    why = "not an address of this machine";
  else if (err == EACCES)
    why = "permission denied";
  else
    why = "not a usable address here";
  throw Error("cannot listen on " + host + ":" +
              (port == 0 ? std::string("any port") : std::to_string(port)) + ": " + why);
}

void HttpServer::run() {
  impl_->svr.listen_after_bind();
}

size_t HttpServer::connections_open() const {
  return impl_->svr.connections_open();
}

void HttpServer::stop() {
  if (impl_) impl_->svr.stop();
}

}  // namespace perfx::server
