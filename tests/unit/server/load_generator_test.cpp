// The load generator against a FakeEngine-backed server: every request completes with the asked
// output length, the statistics are filled, and the URL / percentile helpers behave.
#include "server/load_generator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "perfx/status.h"
#include "test_server.h"

namespace perfx::server {
namespace {

TEST(LoadGenerator, RunsBoundedLoadAndReports) {
  test::FakeEngineOptions eo;
  eo.step_sleep_us = 500;
  test::TestServer s(eo);
  LoadOptions o;
  o.port = s.port;
  o.clients = 4;
  o.requests = 12;
  o.prompt_tokens = 20;
  o.max_tokens = 10;
  LoadReport r = run_load(o);
  EXPECT_EQ(r.completed, 12) << r.first_error;
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.mean_output_tokens, 10);
  EXPECT_NEAR(r.mean_prompt_tokens, 21, 4);  // + BOS; calibrated with /tokenize
  EXPECT_GT(r.requests_per_s, 0);
  EXPECT_GT(r.output_tokens_per_s, 0);
  EXPECT_GT(r.ttft_p50, 0);
  EXPECT_GE(r.ttft_p99, r.ttft_p50);
  EXPECT_GT(r.tpot_p50, 0);
  EXPECT_GE(r.latency_p99, r.latency_p50);
  EXPECT_NE(r.to_text().find("12 completed"), std::string::npos);
  EXPECT_EQ(r.to_json()["completed"], 12);
  // Chat endpoint, bounded by time instead of count.
  o.chat = true;
  o.requests = 0;
  o.duration_s = 0.3;
  r = run_load(o);
  EXPECT_GT(r.completed, 0) << r.first_error;
  EXPECT_EQ(r.failed, 0) << r.first_error;
}

TEST(LoadGenerator, ReportsFailuresAndUnreachableServers) {
  test::TestServer s;
  LoadOptions o;
  o.port = s.port;
  o.clients = 1;
  o.requests = 2;
  o.max_tokens = 100000;  // beyond the context: every request fails with 400
  o.warmup = 0;
  LoadReport r = run_load(o);
  EXPECT_EQ(r.completed, 0);
  EXPECT_EQ(r.failed, 2);
  EXPECT_NE(r.first_error.find("HTTP 400"), std::string::npos) << r.first_error;
  LoadOptions dead;
  dead.port = 1;  // nothing listens there
  EXPECT_THROW(run_load(dead), Error);
  // A duration past a year (a deadline that overflows) is refused before anything is sent.
  dead.duration_s = 1e300;
  try {
    run_load(dead);
    ADD_FAILURE() << "a duration of 1e300 s was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--duration must be 0 (no limit) to 31536000 seconds"),
              std::string::npos)
        << e.what();
  }
}

TEST(LoadGenerator, DisconnectsChecksAndComparesWithTheRequestAlone) {
  test::FakeEngineOptions eo;
  eo.step_sleep_us = 1000;  // the server sees a closed stream well before its 20 tokens left
  test::TestServer s(eo);
  LoadOptions o;
  o.port = s.port;
  o.clients = 4;
  o.requests = 12;
  o.prompt_tokens = 20;
  o.max_tokens = 40;
  o.disconnect_fraction = 0.25;  // requests 3, 7 and 11 close their streams after 20 chunks
  o.check = true;
  o.compare_solo = true;
  LoadReport r = run_load(o);
  EXPECT_EQ(r.disconnected, 3);
  EXPECT_EQ(r.completed, 9) << r.first_error;
  EXPECT_EQ(r.failed, 0) << r.first_error;
  EXPECT_EQ(r.wrong, 0) << r.first_wrong;
  EXPECT_EQ(r.solo_compared, 9);
  EXPECT_EQ(r.solo_equal, 9);  // the fake model's output does not depend on the batch
  EXPECT_NE(r.to_text().find("equal to the request alone: 9 of 9"), std::string::npos)
      << r.to_text();
  EXPECT_EQ(r.to_json()["disconnected"], 3);
  // the server cancelled the closed streams (they did not run to their length) and freed the blocks
  // (the blocks gauge is set by the scheduler's loop after the cancellation is counted: wait for
  // both, or a loaded machine reads the gauge one iteration early)
  std::string m;
  for (int i = 0; i < 400; ++i) {
    m = s.metrics.render();
    if (m.find("finish_reason=\"cancelled\"} 3") != std::string::npos &&
        s.metrics.kv_blocks_used() == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(m.find("perfx_requests_total{finish_reason=\"cancelled\"} 3"), std::string::npos) << m;
  EXPECT_EQ(s.metrics.kv_blocks_used(), 0);
  EXPECT_NE(m.find("perfx_prefix_cache_hit_tokens_total 0"), std::string::npos)
      << "compare_solo sends cache_prompt false: " << m;
  o.temperature = 0.5;
  EXPECT_THROW(run_load(o), Error);  // solo comparison needs greedy decoding
}

TEST(LoadGenerator, CheckResponseRejectsWrongUsageAndFinishReason) {
  LoadOptions o;
  o.max_tokens = 10;
  RequestSample ok;
  ok.ok = true;
  ok.finish_reason = "length";
  ok.output_tokens = 10;
  ok.prompt_tokens = 21;
  EXPECT_EQ(check_response(o, ok), "");
  RequestSample s = ok;
  s.output_tokens = 9;
  EXPECT_NE(check_response(o, s), "");  // short of max_tokens with ignore_eos
  s = ok;
  s.finish_reason = "stop";
  EXPECT_NE(check_response(o, s), "");
  s = ok;
  s.prompt_tokens = 0;
  EXPECT_NE(check_response(o, s), "");
  RequestSample alone = ok;
  alone.prompt_tokens = 22;
  EXPECT_NE(check_response(o, ok, &alone), "");  // other prompt_tokens than alone
  alone.prompt_tokens = 21;
  EXPECT_EQ(check_response(o, ok, &alone), "");
  o.ignore_eos = false;
  s = ok;
  s.finish_reason = "stop";
  s.output_tokens = 4;
  EXPECT_EQ(check_response(o, s), "");
  s.output_tokens = 11;
  EXPECT_NE(check_response(o, s), "");
  s = ok;
  s.output_tokens = 9;  // "length" before max_tokens
  EXPECT_NE(check_response(o, s), "");
  s.finish_reason = "";
  EXPECT_NE(check_response(o, s), "");
}

TEST(LoadGenerator, UrlAndPercentiles) {
  std::string host;
  int port = 0;
  parse_server_url("http://127.0.0.1:8081/", host, port);
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8081);
  parse_server_url("http://localhost", host, port);
  EXPECT_EQ(port, 80);
  EXPECT_THROW(parse_server_url("https://x:1", host, port), Error);
  EXPECT_THROW(parse_server_url("http://x:1/v1", host, port), Error);
  EXPECT_THROW(parse_server_url("http://x:99999", host, port), Error);
  std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_EQ(percentile(v, 50), 3);
  EXPECT_EQ(percentile(v, 99), 5);
  EXPECT_EQ(percentile(v, 0), 1);
  std::vector<double> empty;
  EXPECT_EQ(percentile(empty, 50), 0);
}

}  // namespace
}  // namespace perfx::server
