// `perfx serve` end to end on models/default: 64 concurrent greedy streams equal their solo results
// (on a GPU, up to near-ties) with no KV blocks left in use, and batching pays (>= 2x a single
// client's throughput: a regression guard; the measured scale-up is in docs/SERVING.md);
// malformed requests; client disconnects; flags; and the node tests (official OpenAI client, chat
// page in headless Chromium).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "e2e/cli_util.h"
#include "e2e/server_util.h"
#include "support/test_support.h"

namespace perfx::test {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The value of an unlabelled metric line "name value".
double metric(const std::string& text, const std::string& name) {
  size_t k = text.find("\n" + name + " ");
  if (k == std::string::npos) return -1;
  return std::atof(text.c_str() + k + name.size() + 2);
}

struct StreamResult {
  std::string text;
  int completion_tokens = 0;
  bool done = false;
  // With logprobs requested: each token's string and logprob, and its top alternatives.
  std::vector<std::string> tokens;
  std::vector<double> token_logprobs;
  std::vector<json> top_logprobs;
};

StreamResult stream_completion(int port, const std::string& prompt, int max_tokens,
                               int logprobs = 0) {
  json req = {{"prompt", prompt},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
  if (logprobs > 0) req["logprobs"] = logprobs;
  HttpResponse r = http_request(port, "POST", "/v1/completions", req.dump());
  StreamResult s;
  if (r.status != 200) return s;
  for (const auto& d : sse_payloads(r.body)) {
    if (d == "[DONE]") {
      s.done = true;
      continue;
    }
    json c = json::parse(d);
    if (!c["usage"].is_null()) s.completion_tokens = c["usage"]["completion_tokens"];
    for (const auto& ch : c["choices"]) {
      s.text += ch["text"].get<std::string>();
      const json& lp = ch["logprobs"];
      if (!lp.is_object()) continue;
      for (size_t k = 0; k < lp["tokens"].size(); ++k) {
        s.tokens.push_back(lp["tokens"][k].get<std::string>());
        s.token_logprobs.push_back(lp["token_logprobs"][k].get<double>());
        s.top_logprobs.push_back(lp["top_logprobs"][k]);
      }
    }
  }
  return s;
}

// Whether the servers these tests start run on a GPU (PERFX_TEST_SERVE_ARGS names a cuda or
// opencl device).
bool serving_on_gpu() {
  const char* extra = std::getenv("PERFX_TEST_SERVE_ARGS");
  const std::string e = extra ? extra : "";
  return e.find("--device cuda") != std::string::npos ||
         e.find("--device opencl") != std::string::npos;
}

// A batched greedy stream that left the same prompt's solo stream on a GPU (both run with
// logprobs 2): at the first token where they differ, the batched token must be the solo's
// runner-up, within `tol` nats of the solo's top. A GPU's batched kernels sum in another order
// than its one-token ones (no batch invariance, as in vLLM), so a near-tie may break the other
// way; a different token where the solo draw was clear, or a stream that ends (EOS) where the
// other goes on, fails. Returns whether it held.
bool expect_near_tie(const StreamResult& solo, const StreamResult& batched, int request,
                     double tol = 0.1) {
  const size_t n = std::min(solo.tokens.size(), batched.tokens.size());
  size_t k = 0;
  while (k < n && solo.tokens[k] == batched.tokens[k]) ++k;
  if (k == n) {
    ADD_FAILURE() << "request " << request << ": the same " << k
                  << " tokens, then one stream ends and the other goes on (solo "
                  << solo.tokens.size() << " tokens, batched " << batched.tokens.size()
                  << "; texts '" << solo.text << "' / '" << batched.text << "')";
    return false;
  }
  const json& alts = solo.top_logprobs[k];
  const std::string& tok = batched.tokens[k];
  if (!alts.contains(tok)) {
    ADD_FAILURE() << "request " << request << ": at token " << k << " the solo run drew '"
                  << solo.tokens[k] << "' and the batched one '" << tok
                  << "', not among the solo's top 2 " << alts.dump();
    return false;
  }
  const double margin = solo.token_logprobs[k] - alts[tok].get<double>();
  EXPECT_LE(margin, tol) << "request " << request << ": at token " << k << " the solo run drew '"
                         << solo.tokens[k] << "' (" << solo.token_logprobs[k]
                         << ") and the batched one '" << tok << "' (" << alts[tok].get<double>()
                         << ")";
  if (margin > tol) return false;
  std::printf(
      "[ perfx ] request %d: the batched stream leaves the solo one at token %zu, a near-tie "
      "('%s' vs '%s', %.4f nats apart)\n",
      request, k, solo.tokens[k].c_str(), tok.c_str(), margin);
  return true;
}

TEST(ServeE2E, SixtyFourConcurrentGreedyStreamsEqualSoloResultsAndBatch) {
  REQUIRE_DEFAULT_MODEL();
  ServerProcess srv("-m " + sh_quote(default_model()) + " --max-batch 64");
  ASSERT_TRUE(srv.ok()) << srv.log();
  const int n = 64, max_tokens = 48;
  std::vector<std::string> prompts;
  for (int i = 0; i < n; ++i)
    prompts.push_back("And it came to pass on the " + std::to_string(i + 1) + " day, that");

  auto steps = [&] {
    return metric(http_request(srv.port(), "GET", "/metrics").body, "perfx_engine_steps_total");
  };
  // One client, one request at a time. On a GPU every request asks for logprobs 2, so that a
  // batched stream that differs can be checked token by token (expect_near_tie).
  const bool gpu = serving_on_gpu();
  const int logprobs = gpu ? 2 : 0;
  const double steps0 = steps();
  std::vector<StreamResult> solo((size_t)n);
  int solo_tokens = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    solo[(size_t)i] = stream_completion(srv.port(), prompts[(size_t)i], max_tokens, logprobs);
    ASSERT_TRUE(solo[(size_t)i].done) << "request " << i << "\n" << srv.log();
    solo_tokens += solo[(size_t)i].completion_tokens;
  }
  const double solo_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double solo_steps = steps() - steps0;

  // 64 clients at once.
  std::vector<StreamResult> conc((size_t)n);
  std::vector<std::thread> threads;
  t0 = Clock::now();
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      conc[(size_t)i] = stream_completion(srv.port(), prompts[(size_t)i], max_tokens, logprobs);
    });
  for (auto& t : threads) t.join();
  const double conc_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // The CPU backend is batch invariant: every batched text equals its solo text. On a GPU a
  // batched text may leave the solo one only at a near-tie (expect_near_tie).
  int conc_tokens = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(conc[(size_t)i].done) << i;
    conc_tokens += conc[(size_t)i].completion_tokens;
    if (conc[(size_t)i].text == solo[(size_t)i].text) {
      EXPECT_EQ(conc[(size_t)i].completion_tokens, solo[(size_t)i].completion_tokens) << i;
    } else if (!gpu) {
      EXPECT_EQ(conc[(size_t)i].text, solo[(size_t)i].text) << "request " << i;
    } else {
      expect_near_tie(solo[(size_t)i], conc[(size_t)i], i);
    }
  }
  if (!gpu) {
    EXPECT_EQ(conc_tokens, solo_tokens);
  }
  const double conc_steps = steps() - steps0 - solo_steps;
  const double solo_tps = solo_tokens / solo_s, conc_tps = conc_tokens / conc_s;
  std::printf(
      "[ perfx ] single client: %d tokens in %.0f steps, %.2f s = %.1f tok/s; 64 clients: %d "
      "tokens "
      "in %.0f steps, %.2f s = %.1f tok/s (throughput ratio %.2f, for information: speed is "
      "measured by "
      "bench/serve, not by tests)\n",
      solo_tokens, solo_steps, solo_s, solo_tps, conc_tokens, conc_steps, conc_s, conc_tps,
      conc_tps / solo_tps);
  // Batching, measured without a clock: one client needs a forward pass per token; 64 concurrent
  // ones share passes, so the engine runs several times fewer (a scheduler that stopped batching
  // would run as many). The arrival spread and prefill chunks leave it above 64x fewer.
  EXPECT_GT(solo_steps, 0.9 * solo_tokens);
  EXPECT_LE(conc_steps * 4, solo_steps) << "64 concurrent streams should share forward passes";

  // Nothing left in the KV cache once everything finished.
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = http_request(srv.port(), "GET", "/metrics").body;
    if (metric(m, "perfx_kv_blocks_used") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(metric(m, "perfx_kv_blocks_used"), 0) << m;
  EXPECT_EQ(metric(m, "perfx_running_sequences"), 0);
  EXPECT_EQ(metric(m, "perfx_queue_depth"), 0);
  EXPECT_GT(metric(m, "perfx_kv_blocks_total"), 0);
  // Graph captures: none on the CPU; on CUDA (PERFX_TEST_SERVE_ARGS="--device cuda") the decode
  // steps of this run captured some (first run on an H100 in the thirty-first session).
  const char* extra = std::getenv("PERFX_TEST_SERVE_ARGS");
  if (extra && std::string(extra).find("cuda") != std::string::npos)
    EXPECT_GT(metric(m, "perfx_engine_graphs_captured_total"), 0) << m;
  else
    EXPECT_EQ(metric(m, "perfx_engine_graphs_captured_total"), 0) << m;
}

// Bug (fresh-user run): --kv-cache-tokens 1 was accepted and then cut every reply short with
// finish_reason "length"; a cache smaller than one full-context sequence is now refused.
TEST(ServeE2E, KvCacheSmallerThanTheContextIsRefused) {
  REQUIRE_DEFAULT_MODEL();
  auto r =
      run_perfx("serve -m " + sh_quote(default_model()) + " --port 0 --kv-cache-tokens 16", 30);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(
      r.err.find(
          "perfx: error: a KV cache of 16 tokens cannot hold one sequence of the context size 512"),
      std::string::npos)
      << r.err;
}

TEST(ServeE2E, PreemptionByRecomputeWhenKvBlocksRunOut) {
  REQUIRE_DEFAULT_MODEL();
  // 32 blocks of 16 tokens for 16 sequences that each grow to ~105 tokens (7 blocks): even if the
  // clients' arrivals spread out (a loaded machine), any 5 running together overflow the cache.
  ServerProcess srv("-m " + sh_quote(default_model()) + " --kv-cache-tokens 512 --max-batch 16");
  ASSERT_TRUE(srv.ok()) << srv.log();
  const int n = 16, max_tokens = 96;
  std::vector<std::string> prompts;
  for (int i = 0; i < n; ++i)
    prompts.push_back("The " + std::to_string(i + 1) + " son of Jacob was");
  std::vector<StreamResult> solo((size_t)n), conc((size_t)n);
  for (int i = 0; i < n; ++i)
    solo[(size_t)i] = stream_completion(srv.port(), prompts[(size_t)i], max_tokens);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      conc[(size_t)i] = stream_completion(srv.port(), prompts[(size_t)i], max_tokens);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(solo[(size_t)i].done && conc[(size_t)i].done) << "request " << i << "\n"
                                                              << srv.log();
    EXPECT_EQ(conc[(size_t)i].text, solo[(size_t)i].text) << "request " << i;
  }
  const std::string m = http_request(srv.port(), "GET", "/metrics").body;
  EXPECT_GT(metric(m, "perfx_preemptions_total"), 0) << m;
  EXPECT_EQ(m.find("finish_reason=\"error\""), std::string::npos) << m;
}

TEST(ServeE2E, MalformedRequestsGetTheRightErrorAndTheServerKeepsServing) {
  REQUIRE_DEFAULT_MODEL();
  ServerProcess srv("-m " + sh_quote(default_model()));
  ASSERT_TRUE(srv.ok()) << srv.log();
  struct Case {
    std::string path, body;
    int status;
  };
  std::string big(10 * 1024 * 1024, 'x');
  big = "{\"prompt\": \"" + big + "\"}";
  const std::vector<Case> cases = {
      {"/v1/completions", "{\"prompt\": ", 400},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": "many"})", 400},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": -5})", 400},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 7}]})", 400},
      {"/v1/chat/completions",
       R"({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})", 404},
      {"/v1/completions", big, 413},
      {"/v1/embeddings", R"({"input": "x"})", 404},
  };
  for (const auto& c : cases) {
    HttpResponse r = http_request(srv.port(), "POST", c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body.substr(0, 80) << "\n" << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
    EXPECT_TRUE(j["error"]["type"].is_string()) << r.body;
  }
  HttpResponse ok = http_request(srv.port(), "POST", "/v1/completions",
                                 R"({"prompt": "In the beginning", "max_tokens": 4})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

/// A server started with PERFX_DECODE_OVERLAP set to `value` (the previous value restored).
std::unique_ptr<ServerProcess> server_with_overlap(const std::string& args, const char* value) {
  const char* old = std::getenv("PERFX_DECODE_OVERLAP");
  const std::string saved = old ? old : "";
  setenv("PERFX_DECODE_OVERLAP", value, 1);
  auto srv = std::make_unique<ServerProcess>(args);
  if (old)
    setenv("PERFX_DECODE_OVERLAP", saved.c_str(), 1);
  else
    unsetenv("PERFX_DECODE_OVERLAP");
  return srv;
}

// The overlapped scheduler (a GPU's; PERFX_DECODE_OVERLAP=2 turns it on for the CPU, whose steps
// run inside the call): 24 concurrent greedy streams of 6..40 tokens through 8 batch slots, so
// sequences end and join between overlapped steps, give the texts a server stepping one step at a
// time gives each prompt alone, and no KV block stays in use.
TEST(ServeE2E, OverlappedSchedulerStreamsEqualOneStepAtATime) {
  REQUIRE_DEFAULT_MODEL();
  const std::string args = "-m " + sh_quote(default_model()) + " --max-batch 8";
  const int n = 24;
  std::vector<std::string> prompts;
  for (int i = 0; i < n; ++i)
    prompts.push_back("And the " + std::to_string(i + 3) + " men of the city said");
  auto tokens = [](int i) { return 6 + (i * 11) % 35; };
  std::vector<StreamResult> want((size_t)n), got((size_t)n);
  {
    auto plain = server_with_overlap(args, "0");
    ASSERT_TRUE(plain->ok()) << plain->log();
    for (int i = 0; i < n; ++i)
      want[(size_t)i] = stream_completion(plain->port(), prompts[(size_t)i], tokens(i));
  }
  auto srv = server_with_overlap(args, "2");
  ASSERT_TRUE(srv->ok()) << srv->log();
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back(
        [&, i] { got[(size_t)i] = stream_completion(srv->port(), prompts[(size_t)i], tokens(i)); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(want[(size_t)i].done && got[(size_t)i].done) << i << "\n" << srv->log();
    EXPECT_EQ(got[(size_t)i].text, want[(size_t)i].text) << "request " << i;
    EXPECT_EQ(got[(size_t)i].completion_tokens, want[(size_t)i].completion_tokens) << i;
  }
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = http_request(srv->port(), "GET", "/metrics").body;
    if (metric(m, "perfx_kv_blocks_used") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(metric(m, "perfx_kv_blocks_used"), 0) << m;
  EXPECT_EQ(m.find("finish_reason=\"error\""), std::string::npos) << m;
}

TEST(ServeE2E, DisconnectMidStreamFreesTheSlot) {
  REQUIRE_DEFAULT_MODEL();
  ServerProcess srv("-m " + sh_quote(default_model()));
  ASSERT_TRUE(srv.ok()) << srv.log();
  int fd = connect_loopback(srv.port());
  ASSERT_GE(fd, 0);
  const std::string body =
      R"({"prompt": "In the beginning", "max_tokens": 400, "ignore_eos": true, "stream": true})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), (ssize_t)req.size());
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {  // the stream is running
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, (size_t)n);
  }
  close(fd);
  const auto t0 = Clock::now();
  std::string m;
  while (Clock::now() - t0 < std::chrono::seconds(5)) {
    m = http_request(srv.port(), "GET", "/metrics").body;
    if (metric(m, "perfx_running_sequences") == 0 &&
        m.find("perfx_requests_total{finish_reason=\"cancelled\"} 1") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double freed_after = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ perfx ] slot freed %.3f s after the client closed; %g tokens generated\n",
              freed_after, metric(m, "perfx_generation_tokens_total"));
  EXPECT_EQ(metric(m, "perfx_running_sequences"), 0) << m;
  EXPECT_EQ(metric(m, "perfx_kv_blocks_used"), 0);
  EXPECT_LT(metric(m, "perfx_generation_tokens_total"), 400);
  EXPECT_NE(m.find("perfx_requests_total{finish_reason=\"cancelled\"} 1"), std::string::npos) << m;
}

TEST(ServeE2E, ApiKeyAndBadFlags) {
  REQUIRE_DEFAULT_MODEL();
  {
    ServerProcess srv("-m " + sh_quote(default_model()) + " --api-key s3cret");
    ASSERT_TRUE(srv.ok()) << srv.log();
    const std::string body = R"({"prompt": "a", "max_tokens": 1})";
    EXPECT_EQ(http_request(srv.port(), "POST", "/v1/completions", body).status, 401);
    EXPECT_EQ(
        http_request(srv.port(), "POST", "/v1/completions", body, {"Authorization: Bearer s3cret"})
            .status,
        200);
    EXPECT_EQ(http_request(srv.port(), "GET", "/health").status, 200);
    EXPECT_EQ(srv.stop(), 0) << "SIGTERM shuts the server down cleanly\n" << srv.log();
  }
  CmdResult r = run_perfx("serve -m " + sh_quote(default_model()) + " --max-batch 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--max-batch"), std::string::npos) << r.err;
  // a step budget below one token per sequence plus one prompt chunk (64 + 512 here)
  r = run_perfx("serve -m " + sh_quote(default_model()) + " --max-num-batched-tokens 575");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--max-num-batched-tokens must be 0 (the default) or from --max-batch + "
                       "--prefill-chunk = 576 up to"),
            std::string::npos)
      << r.err;
  r = run_perfx("serve -m " + sh_quote(default_model()) + " --chat-template /nonexistent.jinja");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent.jinja"), std::string::npos) << r.err;
  r = run_perfx("serve -m /nonexistent/model");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

// Reads from `fd` until `needle` arrives, the peer closes or `limit` passes.
std::string read_until(int fd, const std::string& needle, std::chrono::milliseconds limit) {
  std::string got;
  char buf[4096];
  const auto t0 = Clock::now();
  while (got.find(needle) == std::string::npos && Clock::now() - t0 < limit) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, (size_t)n);
  }
  return got;
}

// Issue 8: SIGTERM with a keep-alive connection open exited only after the keep-alive timeout
// (~5 s), and an in-flight stream ran on to a normal-looking "length". Now the process exits
// within a second and the stream ends with finish_reason "abort" and [DONE].
TEST(ServeE2E, SigtermAbortsInFlightStreamsAndExitsPromptly) {
  REQUIRE_DEFAULT_MODEL();
  {  // idle, one keep-alive connection open
    ServerProcess srv("-m " + sh_quote(default_model()));
    ASSERT_TRUE(srv.ok()) << srv.log();
    int fd = connect_loopback(srv.port());
    ASSERT_GE(fd, 0);
    const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(send(fd, req.data(), req.size(), 0), (ssize_t)req.size());
    ASSERT_NE(read_until(fd, "\"ok\"", std::chrono::seconds(10)).find("\"ok\""), std::string::npos);
    const auto t0 = Clock::now();
    EXPECT_EQ(srv.stop(), 0) << srv.log();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("[ perfx ] idle server with a keep-alive connection exited %.3f s after SIGTERM\n",
                s);
    EXPECT_LT(s, 1.0);
    close(fd);
  }
  // A long stream in flight (4000 tokens at a context beyond the trained one).
  ServerProcess srv("-m " + sh_quote(default_model()) + " -c 4096 -t 1");
  ASSERT_TRUE(srv.ok()) << srv.log();
  int fd = connect_loopback(srv.port());
  ASSERT_GE(fd, 0);
  const std::string body =
      R"({"prompt": "In the beginning", "max_tokens": 4000, "ignore_eos": true, "stream": true})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), (ssize_t)req.size());
  std::string got = read_until(fd, "\"text\"", std::chrono::seconds(30));
  ASSERT_NE(got.find("\"text\""), std::string::npos) << got;
  const auto t0 = Clock::now();
  EXPECT_EQ(srv.stop(), 0) << srv.log();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ perfx ] server with a stream in flight exited %.3f s after SIGTERM\n", s);
  EXPECT_LT(s, 1.0);
  got += read_until(fd, "[DONE]", std::chrono::seconds(5));
  close(fd);
  EXPECT_NE(got.find("\"finish_reason\":\"abort\""), std::string::npos)
      << got.substr(got.size() - std::min<size_t>(got.size(), 600));
  EXPECT_EQ(got.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
}

// A client that sent a request's headers and only part of its body held SIGTERM for the 30 s read
// timeout: the body's reads waited on the socket without noticing stop() (the header block's read
// did). Now they do, every 50 ms.
TEST(ServeE2E, SigtermDuringARequestBodyInPartExitsPromptly) {
  REQUIRE_DEFAULT_MODEL();
  ServerProcess srv("-m " + sh_quote(default_model()));
  ASSERT_TRUE(srv.ok()) << srv.log();
  int fd = connect_loopback(srv.port());
  ASSERT_GE(fd, 0);
  const std::string part =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":";
  ASSERT_EQ(send(fd, part.data(), part.size(), 0), (ssize_t)part.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server is reading the body
  const auto t0 = Clock::now();
  EXPECT_EQ(srv.stop(), 0) << srv.log();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("[ perfx ] server reading a request body in part exited %.3f s after SIGTERM\n", s);
  EXPECT_LT(s, 1.0);
  // Dropped unanswered (httplib would have answered the unfinished request 400).
  EXPECT_EQ(read_until(fd, "HTTP/1.1", std::chrono::seconds(2)), "");
  close(fd);
}

// Issue 8, the reported examples on stories260K (SentencePiece vocabulary, real model): the
// continuation keeps its space (plain, streamed, echo); logprobs 11 gives 11 entries, " l" and
// "l" apart; a prompt written with "<s>" keeps both BOS as /tokenize reports; the repetition
// penalty sees the prompt.
TEST(ServeE2E, Stories260KTextExamples) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  ServerProcess srv("-m " + sh_quote(shared_path("models/stories260K-hf")));
  ASSERT_TRUE(srv.ok()) << srv.log();
  auto post = [&](const json& body) {
    HttpResponse r = http_request(srv.port(), "POST", "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? json::parse(r.body) : json();
  };
  const json greedy = {{"prompt", "Once upon a time,"}, {"max_tokens", 4}, {"temperature", 0}};
  EXPECT_EQ(post(greedy)["choices"][0]["text"], " there was a little");
  EXPECT_EQ(stream_completion(srv.port(), "Once upon a time,", 4).text, " there was a little");
  json echo = greedy;
  echo["echo"] = true;
  EXPECT_EQ(post(echo)["choices"][0]["text"], "Once upon a time, there was a little");

  const json lp = post({{"prompt", "Once upon a time, there was a"},
                        {"max_tokens", 1},
                        {"temperature", 0},
                        {"logprobs", 11}})["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"][0], " little");
  EXPECT_EQ(lp["top_logprobs"][0].size(), 11u) << lp.dump();
  EXPECT_TRUE(lp["top_logprobs"][0].contains(" l")) << lp.dump();

  const json bos = post({{"prompt", "<s>Once upon a time"}, {"max_tokens", 1}, {"temperature", 0}});
  const HttpResponse t =
      http_request(srv.port(), "POST", "/tokenize", R"({"prompt": "<s>Once upon a time"})");
  ASSERT_EQ(t.status, 200);
  EXPECT_EQ(json::parse(t.body)["tokens"], json::parse("[1, 1, 403, 407, 261, 378]"));
  EXPECT_EQ(bos["usage"]["prompt_tokens"], 6);
  EXPECT_NE(srv.log().find("perfx serve: warning: the prompt starts with the BOS text '<s>'"),
            std::string::npos)
      << srv.log();

  json rep = {{"prompt", "Lily, Lily,"}, {"max_tokens", 12}, {"temperature", 0}};
  const std::string plain = post(rep)["choices"][0]["text"];
  rep["repetition_penalty"] = 1.3;
  EXPECT_NE(post(rep)["choices"][0]["text"], plain) << "the prompt's 'Lily' is penalised";
}

TEST(ServeE2E, SecondServerOnTheSamePortFails) {
  REQUIRE_DEFAULT_MODEL();
  ServerProcess first("-m " + sh_quote(default_model()));
  ASSERT_TRUE(first.ok()) << first.log();
  const std::string port = std::to_string(first.port());
  // Without the fix the second server binds too (SO_REUSEPORT) and serves until killed.
  CmdResult r =
      run_perfx("serve -m " + sh_quote(default_model()) + " --host 127.0.0.1 --port " + port, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(
      r.err.find("perfx: error: cannot listen on 127.0.0.1:" + port + ": address already in use"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(http_request(first.port(), "GET", "/health").status, 200)
      << "the first server keeps serving";
}

TEST(ServeE2E, CtxSizeFlagAndCtxAlias) {
  REQUIRE_DEFAULT_MODEL();
  for (const std::string flag : {"-c", "--ctx-size", "--ctx"}) {
    ServerProcess srv("-m " + sh_quote(default_model()) + " " + flag + " 128");
    ASSERT_TRUE(srv.ok()) << flag << "\n" << srv.log();
    EXPECT_NE(srv.log().find("(ctx 128,"), std::string::npos) << flag << "\n" << srv.log();
  }
  CmdResult r = run_perfx("serve -m " + sh_quote(default_model()) + " --ctx-size -1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--ctx-size must be >= 0"), std::string::npos) << r.err;
}

// Node tests: skipped with a message when node, the npm packages or chromium are missing.
std::string node_dir() {
  return source_dir() + "/tests/e2e/node";
}

bool have_command(const std::string& c) {
  return std::system(("command -v " + c + " >/dev/null 2>&1").c_str()) == 0;
}

void run_node(const std::string& script, const std::string& url, const std::string& env) {
  const std::string out = make_temp_dir("node") + "/out";
  const std::string cmd = "cd " + sh_quote(node_dir()) + " && PERFX_URL=" + url + " " + env +
                          " timeout 300 node " + script + " >" + out + " 2>&1";
  const int st = std::system(cmd.c_str());
  const std::string log = read_file(out);
  std::printf("%s", log.c_str());
  EXPECT_EQ(st, 0) << log;
}

TEST(ServeE2E, OfficialOpenAIClient) {
  REQUIRE_DEFAULT_MODEL();
  if (!have_command("node"))
    GTEST_SKIP() << "node is not installed (run scripts/install-e2e-deps.sh)";
  if (!path_exists_for_test(node_dir() + "/node_modules/openai/package.json"))
    GTEST_SKIP()
        << "npm package 'openai' missing in tests/e2e/node (run scripts/install-e2e-deps.sh)";
  ServerProcess srv("-m " + sh_quote(default_model()));
  ASSERT_TRUE(srv.ok()) << srv.log();
  run_node("openai_client.test.mjs", srv.url(), "");
}

TEST(ServeE2E, ChatPageInHeadlessChromium) {
  REQUIRE_DEFAULT_MODEL();
  const char* env_chromium = std::getenv("CHROMIUM");
  const std::string chromium = env_chromium && *env_chromium ? env_chromium : "/usr/bin/chromium";
  if (!have_command("node"))
    GTEST_SKIP() << "node is not installed (run scripts/install-e2e-deps.sh)";
  if (!path_exists_for_test(chromium))
    GTEST_SKIP() << chromium
                 << " is missing (apt-get install chromium, or scripts/install-e2e-deps.sh)";
  if (!path_exists_for_test(node_dir() + "/node_modules/playwright-core/package.json"))
    GTEST_SKIP() << "npm package 'playwright-core' missing in tests/e2e/node (run "
                    "scripts/install-e2e-deps.sh)";
  ServerProcess srv("-m " + sh_quote(default_model()));
  ASSERT_TRUE(srv.ok()) << srv.log();
  const std::string shot = std::string(PERFX_BINARY_DIR) + "/chat_page.png";
  run_node("chat_page.test.mjs", srv.url(),
           "CHROMIUM=" + sh_quote(chromium) + " SCREENSHOT=" + sh_quote(shot));
}

}  // namespace
}  // namespace perfx::test
