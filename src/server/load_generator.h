// A load generator for OpenAI-compatible servers (perfx serve, llama.cpp's llama-server, vLLM):
// N concurrent clients on one host send streamed completions with a fixed prompt length and a fixed
// number of output tokens (ignore_eos), bounded by a request count and a duration, and the run is
// summarised as requests/s, output tokens/s, and time-to-first-token / time-per-output-token
// percentiles. Optionally a share of the clients disconnects mid-stream, every completed response's
// usage and finish_reason are checked, and (temperature 0) each response is compared with the same
// request served alone before the load.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace perfx::server {

struct LoadOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string model;        // sent as "model" when not empty
  int clients = 8;          // concurrent connections
  int requests = 64;        // total requests; 0: until duration_s
  double duration_s = 120;  // stop issuing requests after this; 0: until `requests`
  int prompt_tokens = 128;  // prompt length (calibrated with the server's /tokenize if it has one)
  int max_tokens = 128;     // output tokens per request
  bool chat = false;        // /v1/chat/completions instead of /v1/completions
  double temperature = 0;
  bool ignore_eos = true;          // generate exactly max_tokens
  int warmup = 1;                  // requests sent (one at a time) before measuring
  bool unique_prompts = true;      // each request's prompt starts differently (no shared prefix)
  double disconnect_fraction = 0;  // this share of the requests (spread evenly over the issue
                                   // order) closes its stream after max(1, max_tokens / 2) chunks
  bool check = false;              // check each completed response's usage and finish_reason
  bool compare_solo = false;  // serve each request's prompt alone first (needs requests > 0 and
                              // temperature 0) and compare the texts; every request then sends
                              // "cache_prompt": false (no prefix-cache reuse)
};

/// One request's measurements.
struct RequestSample {
  bool ok = false;
  std::string error;
  int prompt_tokens = 0;
  int output_tokens = 0;
  double ttft_s = 0;          // send -> first text
  double tpot_s = 0;          // (last text - first text) / (output_tokens - 1); 0 if < 2 tokens
  double latency_s = 0;       // send -> end of stream
  bool disconnected = false;  // closed by the client on purpose (LoadOptions::disconnect_fraction)
  int prompt_no = -1;         // which prompt (words(n, prompt_no))
  std::string text;           // the streamed text, concatenated
  std::string finish_reason;  // the last non-null finish_reason of the stream
};

/// What is wrong with a completed response (empty: nothing): finish_reason "length" and
/// completion_tokens == max_tokens when o.ignore_eos, else "stop" or "length" within max_tokens
/// ("length" only at max_tokens); prompt_tokens > 0 and, when `solo` is given (the same prompt
/// served alone), equal to its prompt_tokens.
std::string check_response(const LoadOptions& o, const RequestSample& s,
                           const RequestSample* solo = nullptr);

struct LoadReport {
  LoadOptions options;
  int completed = 0;
  int failed = 0;        // errors, excluding the planned disconnects
  int disconnected = 0;  // streams the client closed on purpose
  std::string first_error;
  int wrong = 0;  // completed responses check_response() rejects (LoadOptions::check)
  std::string first_wrong;
  int solo_compared = 0, solo_equal = 0;  // LoadOptions::compare_solo: completed responses
                                          // compared with the request alone / equal to it
  double wall_s = 0;
  double requests_per_s = 0;
  double output_tokens_per_s = 0;
  double mean_prompt_tokens = 0;
  double mean_output_tokens = 0;
  double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0, latency_p50 = 0, latency_p99 = 0;

  /// A human-readable summary.
  std::string to_text() const;
  nlohmann::json to_json() const;
};

/// "http://host:port[/]" -> host, port. Throws perfx::Error for anything else.
void parse_server_url(const std::string& url, std::string& host, int& port);

/// The p-th percentile (0..100, nearest rank) of `v` (sorted in place); 0 for an empty vector.
double percentile(std::vector<double>& v, double p);

/// One streamed request (exposed for tests); stop_after > 0 closes the stream after that many
/// chunks with text (the sample is then `disconnected`).
RequestSample run_one_request(const LoadOptions& o, const std::string& prompt, int stop_after = 0);

/// Runs the whole load. Throws perfx::Error when the server cannot be reached at all.
LoadReport run_load(const LoadOptions& o);

}  // namespace perfx::server
