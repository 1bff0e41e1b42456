// A load generator for OpenAI-compatible servers (perfx serve, llama.cpp's llama-server, vLLM):
// N concurrent clients on one host send streamed completions with a fixed prompt length and a fixed
// number of output tokens (ignore_eos), bounded by a request count and a duration, and the run is
// summarised as requests/s, output tokens/s, and time-to-first-token / time-per-output-token
// percentiles.
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
  bool ignore_eos = true;      // generate exactly max_tokens
  int warmup = 1;              // requests sent (one at a time) before measuring
  bool unique_prompts = true;  // each request's prompt starts differently (no shared prefix)
};

/// One request's measurements.
struct RequestSample {
  bool ok = false;
  std::string error;
  int prompt_tokens = 0;
  int output_tokens = 0;
  double ttft_s = 0;     // send -> first text
  double tpot_s = 0;     // (last text - first text) / (output_tokens - 1); 0 if < 2 tokens
  double latency_s = 0;  // send -> end of stream
};

struct LoadReport {
  LoadOptions options;
  int completed = 0;
  int failed = 0;
  std::string first_error;
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

/// One streamed request (exposed for tests).
RequestSample run_one_request(const LoadOptions& o, const std::string& prompt);

/// Runs the whole load. Throws perfx::Error when the server cannot be reached at all.
LoadReport run_load(const LoadOptions& o);

}  // namespace perfx::server
