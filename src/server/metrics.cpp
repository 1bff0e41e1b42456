// Prometheus text exposition of the server metrics.
#include "server/metrics.h"

#include <cmath>
#include <cstdio>

namespace perfx::server {
namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double v) {
  header(out, name, type, help);
  out += name;
  out += ' ';
  out += num(v);
  out += '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lk(mu_);
  size_t k = 0;
  while (k < bounds_.size() && v > bounds_[k]) ++k;
  counts_[k]++;
  sum_ += v;
  n_++;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t cum = 0;
  for (size_t k = 0; k <= bounds_.size(); ++k) {
    cum += counts_[k];
    std::string le = k < bounds_.size() ? num(bounds_[k]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(n_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}),
      tpot_(
          {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5}),
      e2e_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600}) {}

void Metrics::http_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  http_[{route, status}]++;
}

void Metrics::request_finished(const std::string& finish_reason, double e2e_seconds) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    finished_[finish_reason]++;
  }
  e2e_.observe(e2e_seconds);
}

std::string Metrics::render() const {
  std::string out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    header(out, "perfx_http_requests_total", "counter", "HTTP responses by route and status code.");
    for (const auto& kv : http_) {
      out += "perfx_http_requests_total{route=\"" + escape_label(kv.first.first) + "\",code=\"" +
             std::to_string(kv.first.second) + "\"} " + std::to_string(kv.second) + "\n";
    }
    header(out, "perfx_requests_total", "counter",
           "Generation requests finished, by finish reason (stop, length, abort, cancelled, "
           "timeout, error).");
    for (const auto& kv : finished_) {
      out += "perfx_requests_total{finish_reason=\"" + escape_label(kv.first) + "\"} " +
             std::to_string(kv.second) + "\n";
    }
  }
  scalar(out, "perfx_requests_rejected_total", "counter",
         "Requests rejected because the waiting queue was full.", (double)rejected_.load());
  scalar(out, "perfx_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
         (double)prompt_tokens_.load());
  scalar(out, "perfx_generation_tokens_total", "counter", "Tokens generated.",
         (double)generation_tokens_.load());
  scalar(out, "perfx_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose KV was reused from the prefix cache.",
         (double)prefix_hit_tokens_.load());
  scalar(out, "perfx_preemptions_total", "counter",
         "Sequences preempted (KV blocks released, recomputed later) because blocks ran out.",
         (double)preemptions_.load());
  scalar(out, "perfx_engine_steps_total", "counter", "Forward passes (batched steps) run.",
         (double)steps_.load());
  scalar(out, "perfx_engine_step_tokens_total", "counter", "Tokens processed by forward passes.",
         (double)step_tokens_.load());
  scalar(out, "perfx_engine_step_seconds_total", "counter",
         "Wall time inside forward steps: host preparation, device compute, the wait for the ids.",
         (double)step_ns_.load() * 1e-9);
  scalar(out, "perfx_engine_graphs_captured_total", "counter",
         "Decode-step graphs the backend captured (CUDA graphs, one per batch shape, milliseconds "
         "each; 0 on the CPU). Still rising under steady load: batch shapes that keep changing, "
         "or graphs invalidated (buffers reallocated, the graph cache full).",
         (double)graphs_captured_.load());
  scalar(out, "perfx_scheduler_host_seconds_total", "counter",
         "Scheduler-thread time around the steps: admission, planning, KV allocation, "
         "detokenizing, stop strings, events.",
         (double)host_ns_.load() * 1e-9);
  scalar(out, "perfx_scheduler_host_cpu_seconds_total", "counter",
         "The scheduler thread's CPU time around the steps (its wall time less preemption).",
         (double)host_cpu_ns_.load() * 1e-9);
  scalar(out, "perfx_queue_depth", "gauge", "Requests waiting to join the running batch.",
         queue_depth_.load());
  scalar(out, "perfx_running_sequences", "gauge", "Sequences in the running batch.",
         running_.load());
  scalar(out, "perfx_kv_blocks_used", "gauge", "KV cache blocks referenced by sequences.",
         kv_used_.load());
  scalar(out, "perfx_kv_blocks_total", "gauge", "KV cache blocks in all.", kv_total_.load());
  header(out, "perfx_time_to_first_token_seconds", "histogram",
         "Time from arrival to the first generated token.");
  ttft_.render("perfx_time_to_first_token_seconds", out);
  header(out, "perfx_time_per_output_token_seconds", "histogram",
         "Mean time between output tokens of a sequence, after the first.");
  tpot_.render("perfx_time_per_output_token_seconds", out);
  header(out, "perfx_request_latency_seconds", "histogram",
         "Time from arrival to the end of a generation request.");
  e2e_.render("perfx_request_latency_seconds", out);
  return out;
}

}  // namespace perfx::server
