// Load generator (see load_generator.h).
#include "server/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

#include "perfx/status.h"
#include "server/httplib_config.h"
#include "server/limits.h"

namespace perfx::server {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

httplib::Headers headers_for(const LoadOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

std::unique_ptr<httplib::Client> make_client(const LoadOptions& o) {
  auto c = std::make_unique<httplib::Client>(o.host, o.port);
  c->set_keep_alive(true);
  // httplib writes the request line + headers and the body separately; without TCP_NODELAY,
  // Nagle holds the body until the server's delayed ACK (~40 ms), which showed up as a 45 ms TTFT.
  c->set_tcp_nodelay(true);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(600, 0);
  c->set_write_timeout(60, 0);
  return c;
}

// Text of `n` common English words, starting at word `shift` of the list (a prompt that tokenizes
// to about one token per word; different shifts share no prefix).
std::string words(int n, int shift = 0) {
  static const char* const kWords[] = {"the",  "of",  "and",  "to",   "in",   "that",  "he",
                                       "was",  "for", "it",   "with", "as",   "his",   "on",
                                       "be",   "at",  "by",   "had",  "not",  "are",   "but",
                                       "from", "or",  "have", "an",   "they", "which", "one"};
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[(i + shift) % (int)(sizeof kWords / sizeof kWords[0])];
  }
  return s;
}

// Tokens of `text` by the server's /tokenize (without special tokens); -1 if it has none.
int count_tokens(httplib::Client& c, const LoadOptions& o, const std::string& text) {
  nlohmann::json req = {{"content", text}, {"add_special", false}};
  auto r = c.Post("/tokenize", headers_for(o), req.dump(), "application/json");
  if (!r || r->status != 200) return -1;
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("tokens") || !j["tokens"].is_array()) return -1;
  return (int)j["tokens"].size();
}

// How many words make a prompt of o.prompt_tokens tokens (as near as the tokenizer allows).
int prompt_words(const LoadOptions& o) {
  auto c = make_client(o);
  int n = std::max(1, o.prompt_tokens);
  for (int iter = 0; iter < 8; ++iter) {
    const int got = count_tokens(*c, o, words(n));
    if (got < 0) return n;  // no /tokenize: one token per word is close enough
    if (got == o.prompt_tokens || got == 0) return n;
    int next = std::max(1, (int)std::lround((double)n * o.prompt_tokens / got));
    if (next == n) next += got < o.prompt_tokens ? 1 : -1;
    if (next < 1) return n;
    n = next;
  }
  return n;
}

}  // namespace

void parse_server_url(const std::string& url, std::string& host, int& port) {
  std::string rest = url;
  const std::string scheme = "http://";
  check(rest.rfind(scheme, 0) == 0, "--url must look like http://HOST:PORT, got '" + url + "'");
  rest = rest.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  check(rest.find('/') == std::string::npos, "--url must not have a path: '" + url + "'");
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) {
    host = rest;
    port = 80;
  } else {
    host = rest.substr(0, colon);
    const std::string p = rest.substr(colon + 1);
    check(!p.empty() && p.find_first_not_of("0123456789") == std::string::npos && p.size() <= 5,
          "bad port in --url '" + url + "'");
    port = std::stoi(p);
    check(port > 0 && port <= 65535, "bad port in --url '" + url + "'");
  }
  check(!host.empty(), "no host in --url '" + url + "'");
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = (size_t)std::ceil(p / 100.0 * (double)v.size());
  if (rank < 1) rank = 1;
  return v[std::min(rank, v.size()) - 1];
}

namespace {

RequestSample request_on(httplib::Client& c, const LoadOptions& o, const std::string& prompt,
                         int stop_after = 0) {
  RequestSample s;
  nlohmann::json req = {{"max_tokens", o.max_tokens},
                        {"temperature", o.temperature},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}},
                        {"ignore_eos", o.ignore_eos}};
  if (!o.model.empty()) req["model"] = o.model;
  // Comparing with the request alone: every prompt computed in full (no prefix-cache reuse
  // between the solo pass and the load; llama.cpp's field, perfx honours it too).
  if (o.compare_solo) req["cache_prompt"] = false;
  if (o.chat) {
    req["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt}}});
  } else {
    req["prompt"] = prompt;
  }
  httplib::Request hr;
  hr.method = "POST";
  hr.path = o.chat ? "/v1/chat/completions" : "/v1/completions";
  hr.headers = headers_for(o);
  hr.set_header("Content-Type", "application/json");
  hr.body = req.dump();
  std::string buf;
  int chunks_with_text = 0;
  bool done = false;
  Clock::time_point t_first, t_last;
  Clock::time_point t0 = Clock::now();
  hr.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    size_t k;
    while ((k = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, k);
      buf.erase(0, k + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      std::string payload = ev.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      auto j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        s.error = j["error"].value("message", "error event");
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        s.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        s.output_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (!j.contains("choices") || !j["choices"].is_array()) continue;
      for (const auto& ch : j["choices"]) {
        if (ch.contains("finish_reason") && ch["finish_reason"].is_string())
          s.finish_reason = ch["finish_reason"];
        std::string text;
        if (ch.contains("text") && ch["text"].is_string()) text = ch["text"];
        if (ch.contains("delta") && ch["delta"].contains("content") &&
            ch["delta"]["content"].is_string())
          text = ch["delta"]["content"];
        if (text.empty()) continue;
        s.text += text;
        const auto now = Clock::now();
        if (chunks_with_text++ == 0) t_first = now;
        t_last = now;
      }
    }
    if (stop_after > 0 && chunks_with_text >= stop_after && !done) {
      s.disconnected = true;  // close the stream mid-way, as a client that goes away
      return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = c.send(hr, res, err);
  if (!sent && buf.empty() && chunks_with_text == 0 &&
      (err == httplib::Error::Read || err == httplib::Error::Write)) {
    // The server closed the kept-alive connection as we reused it (llama-server can, right after
    // a stream): once more on a fresh connection, timed from the new send.
    c.stop();
    res = httplib::Response();
    err = httplib::Error::Success;
    t0 = Clock::now();
    sent = c.send(hr, res, err);
  }
  const auto t_end = Clock::now();
  s.latency_s = since(t0, t_end);
  if (s.disconnected) {
    c.stop();  // the connection is mid-response: the next request opens a new one
    return s;
  }
  if (!sent) {
    s.error = "request failed: " + httplib::to_string(err);
    return s;
  }
  if (res.status != 200) {
    s.error = "HTTP " + std::to_string(res.status) + ": " + buf.substr(0, 300);
    return s;
  }
  if (!s.error.empty()) return s;
  if (!done) {
    s.error = "the stream ended without data: [DONE]";
    return s;
  }
  if (s.output_tokens == 0) s.output_tokens = chunks_with_text;  // server without usage
  if (chunks_with_text > 0) s.ttft_s = since(t0, t_first);
  if (s.output_tokens > 1 && chunks_with_text > 1)
    s.tpot_s = since(t_first, t_last) / (s.output_tokens - 1);
  s.ok = true;
  return s;
}

}  // namespace

RequestSample run_one_request(const LoadOptions& o, const std::string& prompt, int stop_after) {
  auto c = make_client(o);
  return request_on(*c, o, prompt, stop_after);
}

std::string check_response(const LoadOptions& o, const RequestSample& s,
                           const RequestSample* solo) {
  const std::string got = "finish_reason '" + s.finish_reason + "', completion_tokens " +
                          std::to_string(s.output_tokens) + ", prompt_tokens " +
                          std::to_string(s.prompt_tokens);
  if (o.ignore_eos) {
    if (s.finish_reason != "length" || s.output_tokens != o.max_tokens)
      return got + " (want 'length' and " + std::to_string(o.max_tokens) + " with ignore_eos)";
  } else if (!((s.finish_reason == "length" && s.output_tokens == o.max_tokens) ||
               (s.finish_reason == "stop" && s.output_tokens <= o.max_tokens))) {
    return got + " (want 'stop' within, or 'length' at, " + std::to_string(o.max_tokens) + ")";
  }
  if (s.prompt_tokens <= 0) return got + " (want prompt_tokens > 0)";
  if (solo != nullptr && s.prompt_tokens != solo->prompt_tokens)
    return got + " (the same prompt alone: prompt_tokens " + std::to_string(solo->prompt_tokens) +
           ")";
  return "";
}

LoadReport run_load(const LoadOptions& o) {
  check(o.clients >= 1, "--clients must be >= 1");
  check(o.requests > 0 || o.duration_s > 0, "give --requests or --duration (or both)");
  check_seconds("--duration", o.duration_s);
  check(o.max_tokens >= 1, "--max-tokens must be >= 1");
  check(o.prompt_tokens >= 1, "--prompt-tokens must be >= 1");
  {
    auto c = make_client(o);
    auto r = c->Get("/v1/models", headers_for(o));
    // httplib names a refused or unreachable connection only "Connection".
    check((bool)r, "cannot reach http://" + o.host + ":" + std::to_string(o.port) + " (" +
                       (r.error() == httplib::Error::Connection
                            ? std::string("no connection: is a server listening there?")
                            : httplib::to_string(r.error())) +
                       ")");
  }
  check(o.disconnect_fraction >= 0 && o.disconnect_fraction < 1,
        "--disconnect-fraction must be in [0, 1)");
  check(!o.compare_solo || (o.requests > 0 && o.temperature == 0),
        "--compare-solo needs --requests > 0 and --temperature 0");
  const int n_words = prompt_words(o);
  auto prompt = [&](int no) { return words(n_words, o.unique_prompts ? no : 0); };
  for (int i = 0; i < o.warmup; ++i) {
    RequestSample w = run_one_request(o, prompt(i));
    check(w.ok, "warm-up request failed: " + w.error);
  }
  // Request i of the load sends prompt warmup + i; with compare_solo each is first served alone.
  std::vector<RequestSample> solo;
  if (o.compare_solo)
    for (int i = 0; i < o.requests; ++i) {
      solo.push_back(run_one_request(o, prompt(o.warmup + i)));
      check(solo.back().ok, "request " + std::to_string(i) + " alone failed: " + solo.back().error);
    }
  const int stop_after = std::max(1, o.max_tokens / 2);
  auto disconnects = [&](int i) {  // floor(n · f) of the first n requests, spread evenly
    return (int)std::floor((i + 1) * o.disconnect_fraction) >
           (int)std::floor(i * o.disconnect_fraction);
  };

  std::vector<RequestSample> samples;
  std::mutex mu;
  std::atomic<int> issued{0};
  const Clock::time_point t0 = Clock::now();
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(
               std::chrono::duration<double>(o.duration_s > 0 ? o.duration_s : 1e9));
  std::vector<std::thread> threads;
  for (int t = 0; t < o.clients; ++t) {
    threads.emplace_back([&] {
      auto client = make_client(o);  // one keep-alive connection per simulated user
      while (Clock::now() < deadline) {
        const int i = issued.fetch_add(1);
        if (o.requests > 0 && i >= o.requests) break;
        RequestSample s =
            request_on(*client, o, prompt(o.warmup + i), disconnects(i) ? stop_after : 0);
        s.prompt_no = o.warmup + i;
        std::lock_guard<std::mutex> lk(mu);
        samples.push_back(std::move(s));
      }
    });
  }
  for (auto& th : threads) th.join();

  LoadReport rep;
  rep.options = o;
  rep.wall_s = since(t0, Clock::now());
  std::vector<double> ttft, tpot, lat;
  double out_tokens = 0, prompt_tokens = 0;
  for (const auto& s : samples) {
    if (s.disconnected) {
      rep.disconnected++;
      continue;
    }
    if (!s.ok) {
      rep.failed++;
      if (rep.first_error.empty()) rep.first_error = s.error;
      continue;
    }
    rep.completed++;
    const RequestSample* alone = o.compare_solo ? &solo[(size_t)(s.prompt_no - o.warmup)] : nullptr;
    if (o.check) {
      const std::string why = check_response(o, s, alone);
      if (!why.empty() && rep.wrong++ == 0)
        rep.first_wrong = "prompt " + std::to_string(s.prompt_no) + ": " + why;
    }
    if (alone != nullptr) {
      rep.solo_compared++;
      rep.solo_equal += s.text == alone->text ? 1 : 0;
    }
    out_tokens += s.output_tokens;
    prompt_tokens += s.prompt_tokens;
    ttft.push_back(s.ttft_s);
    if (s.tpot_s > 0) tpot.push_back(s.tpot_s);
    lat.push_back(s.latency_s);
  }
  if (rep.wall_s > 0) {
    rep.requests_per_s = rep.completed / rep.wall_s;
    rep.output_tokens_per_s = out_tokens / rep.wall_s;
  }
  if (rep.completed > 0) {
    rep.mean_output_tokens = out_tokens / rep.completed;
    rep.mean_prompt_tokens = prompt_tokens / rep.completed;
  }
  rep.ttft_p50 = percentile(ttft, 50);
  rep.ttft_p99 = percentile(ttft, 99);
  rep.tpot_p50 = percentile(tpot, 50);
  rep.tpot_p99 = percentile(tpot, 99);
  rep.latency_p50 = percentile(lat, 50);
  rep.latency_p99 = percentile(lat, 99);
  return rep;
}

std::string LoadReport::to_text() const {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "clients %d, %s, prompt %.0f tokens, output %.0f tokens (mean)\n"
                "requests: %d completed, %d failed in %.2f s\n"
                "throughput: %.2f requests/s, %.1f output tokens/s\n"
                "TTFT: p50 %.1f ms, p99 %.1f ms\n"
                "TPOT: p50 %.2f ms, p99 %.2f ms\n"
                "latency: p50 %.3f s, p99 %.3f s\n",
                options.clients, options.chat ? "chat" : "completions", mean_prompt_tokens,
                mean_output_tokens, completed, failed, wall_s, requests_per_s, output_tokens_per_s,
                ttft_p50 * 1e3, ttft_p99 * 1e3, tpot_p50 * 1e3, tpot_p99 * 1e3, latency_p50,
                latency_p99);
  std::string out = buf;
  if (!first_error.empty()) out += "first error: " + first_error + "\n";
  if (options.disconnect_fraction > 0)
    out += "disconnected mid-stream on purpose: " + std::to_string(disconnected) + "\n";
  if (options.check)
    out += "checked usage and finish_reason: " + std::to_string(wrong) + " wrong of " +
           std::to_string(completed) + (first_wrong.empty() ? "" : "; first: " + first_wrong) +
           "\n";
  if (options.compare_solo) {
    std::snprintf(buf, sizeof buf, "equal to the request alone: %d of %d (%.1f%%)\n", solo_equal,
                  solo_compared, solo_compared ? 100.0 * solo_equal / solo_compared : 0.0);
    out += buf;
  }
  return out;
}

nlohmann::json LoadReport::to_json() const {
  return {{"server", "http://" + options.host + ":" + std::to_string(options.port)},
          {"clients", options.clients},
          {"endpoint", options.chat ? "chat" : "completions"},
          {"prompt_tokens_requested", options.prompt_tokens},
          {"max_tokens", options.max_tokens},
          {"completed", completed},
          {"failed", failed},
          {"disconnected", disconnected},
          {"first_error", first_error},
          {"wrong", wrong},
          {"first_wrong", first_wrong},
          {"solo_compared", solo_compared},
          {"solo_equal", solo_equal},
          {"wall_s", wall_s},
          {"requests_per_s", requests_per_s},
          {"output_tokens_per_s", output_tokens_per_s},
          {"mean_prompt_tokens", mean_prompt_tokens},
          {"mean_output_tokens", mean_output_tokens},
          {"ttft_p50_s", ttft_p50},
          {"ttft_p99_s", ttft_p99},
          {"tpot_p50_s", tpot_p50},
          {"tpot_p99_s", tpot_p99},
          {"latency_p50_s", latency_p50},
          {"latency_p99_s", latency_p99}};
}

}  // namespace perfx::server
