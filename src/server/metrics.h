// Server metrics in the Prometheus text exposition format (version 0.0.4): counters, gauges and
// histograms, updated from the HTTP threads and the scheduler thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace perfx::server {

/// A histogram with fixed upper bounds (seconds); thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  /// Appends "<name>_bucket{le=...} n", "_sum" and "_count" lines.
  void render(const std::string& name, std::string& out) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

/// Every metric the server exports (names prefixed "perfx_").
class Metrics {
 public:
  Metrics();

  /// One HTTP response: perfx_http_requests_total{route, code}.
  void http_request(const std::string& route, int status);
  /// A generation request finished: perfx_requests_total{finish_reason} (stop, length, cancelled,
  /// error, timeout) and the end-to-end latency histogram.
  void request_finished(const std::string& finish_reason, double e2e_seconds);
  void add_prompt_tokens(int64_t n) { prompt_tokens_ += n; }
  void add_generation_tokens(int64_t n) { generation_tokens_ += n; }
  void add_prefix_cache_hit_tokens(int64_t n) { prefix_hit_tokens_ += n; }
  void add_preemption() { preemptions_++; }
  void add_rejected() { rejected_++; }
  void add_step(int tokens) {
    steps_++;
    step_tokens_ += tokens;
  }
  /// One step's wall time inside Engine::step (host preparation, the device's compute, the wait
  /// for the sampled ids) and the scheduler thread's wall and CPU time around it (admission,
  /// planning, KV allocation, detokenizing, stop strings, handing events to the HTTP threads),
  /// seconds. The CPU time leaves out what other threads took from the scheduler's core.
  void add_step_time(double step_s, double host_s, double host_cpu_s) {
    step_ns_ += (int64_t)(step_s * 1e9);
    host_ns_ += (int64_t)(host_s * 1e9);
    host_cpu_ns_ += (int64_t)(host_cpu_s * 1e9);
  }
  void observe_ttft(double s) { ttft_.observe(s); }
  void observe_tpot(double s) { tpot_.observe(s); }

  void set_queue_depth(int n) { queue_depth_ = n; }
  void set_running(int n) { running_ = n; }
  void set_kv_blocks(int used, int total) {
    kv_used_ = used;
    kv_total_ = total;
  }
  /// Decode-step graphs the engine's backend has captured so far (Engine::graphs_captured).
  void set_graphs_captured(uint64_t n) { graphs_captured_ = (int64_t)n; }

  int queue_depth() const { return queue_depth_; }
  int running() const { return running_; }
  int kv_blocks_used() const { return kv_used_; }
  int64_t generation_tokens() const { return generation_tokens_; }
  int64_t preemptions() const { return preemptions_; }
  double step_seconds() const { return (double)step_ns_.load() * 1e-9; }
  double host_seconds() const { return (double)host_ns_.load() * 1e-9; }
  double host_cpu_seconds() const { return (double)host_cpu_ns_.load() * 1e-9; }

  /// The whole exposition text.
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::map<std::string, uint64_t> finished_;
  std::atomic<int64_t> prompt_tokens_{0}, generation_tokens_{0}, prefix_hit_tokens_{0};
  std::atomic<int64_t> preemptions_{0}, rejected_{0}, steps_{0}, step_tokens_{0};
  std::atomic<int64_t> step_ns_{0}, host_ns_{0}, host_cpu_ns_{0}, graphs_captured_{0};
  std::atomic<int> queue_depth_{0}, running_{0}, kv_used_{0}, kv_total_{0};
  Histogram ttft_, tpot_, e2e_;
};

}  // namespace perfx::server
