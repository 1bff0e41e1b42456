// An HttpServer on a free loopback port in front of a FakeEngine, for the server tests.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "fake_engine.h"
#include "server/completions.h"
#include "server/http.h"
#include "server/httplib_config.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace perfx::test {

/// Serves until destroyed; the constructor returns once /health answers.
struct TestServer {
  test::FakeEngine engine;
  server::Metrics metrics;
  server::Scheduler scheduler;
  server::CompletionService service;
  server::HttpServer http;
  int port = 0;
  std::thread thread;

  explicit TestServer(FakeEngineOptions eo = {}, server::SchedulerOptions so = {},
                      server::HttpOptions ho = {})
      : engine(eo),
        scheduler(engine, so, &metrics),
        service(engine, scheduler, std::make_unique<ChatTemplate>(builtin_chat_template("chatml")),
                "fake-model"),
        http(service, scheduler, metrics, ho) {
    port = http.bind("127.0.0.1", 0);
    scheduler.start();
    thread = std::thread([this] { http.run(); });
    for (int i = 0; i < 500; ++i) {  // until it answers
      auto r = client().Get("/health");
      if (r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~TestServer() {
    http.stop();
    thread.join();
    scheduler.stop();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    c.set_write_timeout(60, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const std::string& body,
                       const httplib::Headers& h = {}) const {
    return client().Post(path.c_str(), h, body, "application/json");
  }
};

}  // namespace perfx::test
