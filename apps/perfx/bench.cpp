// perfx bench: llama-bench-style prompt processing (pp) and text generation (tg) throughput.
//   pp N: one sequence prefills N tokens from an empty cache in one step; tokens/s = N / time.
//   tg N: one sequence (or -B sequences at once) decodes N tokens one step at a time from an empty
//         cache, each step sampling greedily on the backend, the next step queued before this
//         one's ids reach the host (Engine::step_begin); tokens/s = N · B / time.
// Each test runs once to warm up (a tg test on a backend that captures decode graphs: a short run,
// then one of the test's length, so that no capture falls inside the timed runs), and again until
// the warm-up has taken kWarmupFloorNs, then -r times;
// the table gives mean ± sample standard deviation of tokens/s over the repetitions (llama-bench's
// avg_ts / stddev_ts). -o json writes llama-bench's field names, one object per test in a list.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "common.h"
#include "core/thread_pool.h"
#include "perfx/model_config.h"
#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct BenchArgs {
  TypeFlags types;  // --cache-type-k / -v, --kv-cache-dtype, --lm-head-type
  std::string model, device = "cpu", output = "md";
  std::vector<int> n_prompt = {512}, n_gen = {128}, batch = {1};
  int reps = 5, threads = 0;
};

struct Result {
  int n_prompt = 0, n_gen = 0, batch = 1;
  size_t peak_rss = 0;     // of the process after this test
  std::vector<double> ns;  // per repetition
  double avg_ts() const {
    double s = 0;
    for (double t : samples_ts()) s += t;
    return s / (double)ns.size();
  }
  double stddev_ts() const {
    if (ns.size() < 2) return 0;
    const double m = avg_ts();
    double s = 0;
    for (double t : samples_ts()) s += (t - m) * (t - m);
    return std::sqrt(s / (double)(ns.size() - 1));
  }
  std::vector<double> samples_ts() const {
    std::vector<double> v;
    const double tokens = n_prompt > 0 ? n_prompt : (double)n_gen * batch;
    for (double t : ns) v.push_back(tokens * 1e9 / t);
    return v;
  }
  std::string name() const {
    if (n_prompt > 0) return "pp" + std::to_string(n_prompt);
    return "tg" + std::to_string(n_gen) + (batch > 1 ? " x" + std::to_string(batch) : "");
  }
};

double now_ns() {
  return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Token ids that are valid for the model, varied so no cache or branch sees the same id twice in
/// a row (llama-bench uses random ids too).
std::vector<int32_t> ids_for(const Engine& e, int n, int salt) {
  std::vector<int32_t> v((size_t)n);
  const int32_t V = (int32_t)std::min<int64_t>(e.config().vocab_size, e.tokenizer().vocab_size());
  for (int i = 0; i < n; ++i)
    v[(size_t)i] = (int32_t)((i * 7919 + salt * 104729 + 3) % std::max(V - 3, 1)) + 3;
  return v;
}

/// A test's warm-up runs repeat until they have taken this long in all (at least one run): a GPU
/// left idle while the model loaded (seconds of host work for random weights) needs a while at
/// load to reach its clocks, and one 3 ms warm-up of TinyLlama's pp512 on an H100 left the timed
/// repetitions after it at 34k, 74k, 98k, 123k and 141k tok/s against a steady 164k (thirty-first
/// session). A run that takes longer than this on its own (any CPU test at real sizes) is the only
/// warm-up, as before; shorter ones (a small model's tests on the CPU too) repeat.
constexpr double kWarmupFloorNs = 0.25e9;

/// One pp run: seconds in ns.
double run_pp(Engine& e, int n, int salt) {
  const SeqId s = e.create_sequence();
  std::vector<Engine::StepItem> items(1);
  items[0].seq = s;
  items[0].tokens = ids_for(e, n, salt);
  SamplingParams g;
  g.temperature = 0;
  Sampler sampler(g);
  items[0].sampler = &sampler;  // the step ends with a sampled id, as prefill does for real
  Engine::StepResult r;
  const double t0 = now_ns();
  e.step(items, r);
  const double t = now_ns() - t0;
  e.release_sequence(s);
  return t;
}

/// One tg run of n tokens for `batch` sequences at once.
double run_tg(Engine& e, int n, int batch, int salt) {
  std::vector<SeqId> seqs;
  SamplingParams g;
  g.temperature = 0;
  std::vector<Sampler> samplers((size_t)batch, Sampler(g));
  std::vector<Engine::StepItem> items((size_t)batch);
  for (int b = 0; b < batch; ++b) {
    seqs.push_back(e.create_sequence());
    items[(size_t)b].seq = seqs.back();
    items[(size_t)b].tokens = {ids_for(e, 1, salt + b)[0]};
    items[(size_t)b].sampler = &samplers[(size_t)b];
  }
  Engine::StepResult r;
  const double t0 = now_ns();
  // Overlapped decode (Engine::step_begin): step i + 1 is queued, its tokens fed from step i's
  // samples on the device, before step i's ids reach the host (PERFX_DECODE_OVERLAP=0: not).
  if (n > 0) e.step_begin(items);
  for (auto& it : items) {
    it.tokens.clear();
    it.token_from_sample = true;
  }
  for (int i = 0; i < n; ++i) {
    if (i + 1 < n) e.step_begin(items);
    e.step_end(r);
  }
  const double t = now_ns() - t0;
  for (SeqId s : seqs) e.release_sequence(s);
  return t;
}

/// The markdown table, columns as llama-bench's (device scripts read them by position): the model
/// as run names it (the path is -o json's model_filename), params in M below a billion and in B
/// from it (llama-bench's "7.34 M" / "6.74 B").
void print_table(const Engine& e, const std::vector<Result>& results, int64_t n_params,
                 const std::string& threads) {
  char params[32];
  if (n_params < 1000000000)
    std::snprintf(params, sizeof params, "%.2f M", (double)n_params / 1e6);
  else
    std::snprintf(params, sizeof params, "%.2f B", (double)n_params / 1e9);
  std::printf("| model | size | params | backend | threads | test | t/s |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
  for (const auto& r : results) {
    char ts[64];
    std::snprintf(ts, sizeof ts, "%.2f ± %.2f", r.avg_ts(), r.stddev_ts());
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", e.model_name().c_str(),
                human_bytes(e.weight_bytes()).c_str(), params, e.device().c_str(), threads.c_str(),
                r.name().c_str(), ts);
  }
}

/// `advice`: what to lower if memory runs out, in bench's flags (set as the run goes on).
void bench(const BenchArgs& a, std::string& advice) {
  check(a.reps >= 1 && a.reps <= 1000, "-r must be 1..1000, got " + std::to_string(a.reps));
  for (int p : a.n_prompt)
    check(p >= 0 && p <= 65536, "-p must be 0..65536, got " + std::to_string(p));
  for (int n : a.n_gen)
    check(n >= 0 && n <= 65536, "-n must be 0..65536, got " + std::to_string(n));
  for (int b : a.batch) check(b >= 1 && b <= 4096, "-B must be 1..4096, got " + std::to_string(b));
  check(a.output == "md" || a.output == "json", "-o must be md or json, got '" + a.output + "'");
  // 0 means "no such test"; with no test at all the table would be empty.
  const auto positive = [](int x) { return x > 0; };
  check(std::any_of(a.n_prompt.begin(), a.n_prompt.end(), positive) ||
            std::any_of(a.n_gen.begin(), a.n_gen.end(), positive),
        "nothing to measure: -p and -n are both 0 (give -p N for a prompt-processing test or -n N "
        "for a generation test)");
  EngineOptions eo;
  eo.model_path = a.model.empty() ? default_model_path() : a.model;
  eo.tokenizer_path = tokenizer_override(eo.model_path);
  eo.device = a.device;
  eo.n_threads = a.threads;
  a.types.apply(eo);
  // Each test runs alone (pp and tg apart, as llama-bench's, so -p and -n never add up): a pp test
  // holds one sequence of p + 1 tokens, a tg test -B sequences of n + 2 (the step queued ahead).
  // The context is the longest sequence; the KV cache holds the largest test's sequences, each in
  // whole blocks (so -B sizes nothing without a tg test).
  const auto in_blocks = [&](int tokens) {
    return (int64_t)(tokens + eo.block_size - 1) / eo.block_size * eo.block_size;
  };
  int need_ctx = 1;
  int64_t kv_tokens = 0;
  int kv_n = 0, kv_b = 0;  // the tg test that sizes the KV cache (0: a pp test does)
  for (int p : a.n_prompt)
    if (p > 0) {
      need_ctx = std::max(need_ctx, p + 1);
      kv_tokens = std::max(kv_tokens, in_blocks(p + 1));
    }
  for (int n : a.n_gen)
    if (n > 0) {
      need_ctx = std::max(need_ctx, n + 2);
      for (int b : a.batch)
        if (b * in_blocks(n + 2) > kv_tokens) {
          kv_tokens = b * in_blocks(n + 2);
          kv_n = n;
          kv_b = b;
        }
    }
  // The engine's own errors name run's -c and serve's --kv-cache-tokens: bench's name its flags.
  check(kv_tokens <= kMaxKvCacheTokens,
        "-n " + std::to_string(kv_n) + " with -B " + std::to_string(kv_b) +
            " needs a KV cache of " + std::to_string(kv_tokens) +
            " tokens, more than the engine holds (" + std::to_string(kMaxKvCacheTokens) +
            "); lower -n or -B");
  eo.ctx = need_ctx;
  eo.kv_cache_tokens = (int)kv_tokens;
  // Past the model's trained context a test runs, timed as usual, with a note; past 4 times it, or
  // past a sliding window (attention beyond it is not implemented), an error naming the flag and
  // its largest value, before the weights load.
  int64_t trained = 0;
  std::string past;  // the tests beyond the trained context
  eo.check_config = [&](const ModelConfig& c) {
    trained = c.trained_context();
    const int64_t most = 4 * std::min<int64_t>(trained, INT32_MAX / 4);
    const auto fits = [](const std::string& f, int value, int ctx, int64_t limit,
                         const std::string& what) {
      check(ctx <= limit, f + " " + std::to_string(value) + " needs a context of " +
                              std::to_string(ctx) + " tokens, more than " + what + " (" + f +
                              " can be at most " + std::to_string(limit - (ctx - value)) + ")");
    };
    // ctx: the tokens the test's sequence holds; used: the positions the model computes (a pp
    // test's step ends with one sampled id, which holds a slot but is never run).
    const auto test_ctx = [&](const std::string& f, const std::string& test, int value, int ctx,
                              int used) {
      fits(f, value, ctx, most,
           "4 times the model's trained context of " + std::to_string(trained) + " tokens");
      if (c.sliding_window > 0)
        fits(f, value, ctx, c.sliding_window,
             "the model's sliding_window of " + std::to_string(c.sliding_window) +
                 " tokens (config.json), past which attention is not implemented");
      if (used > trained) past += (past.empty() ? "" : ", ") + test;
    };
    for (int p : a.n_prompt)
      if (p > 0) test_ctx("-p", "pp" + std::to_string(p), p, p + 1, p);
    for (int n : a.n_gen)
      if (n > 0) test_ctx("-n", "tg" + std::to_string(n), n, n + 2, n + 2);
  };
  advice = kv_n > 0 ? "lower -n or -B" : "lower -p";  // what sized the KV cache
  warn_if_oversubscribed(a.threads);
  const double t_load = now_ns();
  auto e = Engine::load(eo);
  std::fprintf(stderr, "perfx: loaded %s in %.2f s; weights %s on %s\n", eo.model_path.c_str(),
               (now_ns() - t_load) / 1e9, human_bytes(e->weight_bytes()).c_str(),
               e->device().c_str());
  if (!past.empty())
    std::fprintf(stderr,
                 "perfx: note: %s run%s past the model's trained context of %lld tokens (bench "
                 "sizes the context to the longest test: %d tokens); timed as usual, though the "
                 "model's output there is not meaningful\n",
                 past.c_str(), past.find(',') == std::string::npos ? "s" : "", (long long)trained,
                 need_ctx);

  std::vector<Result> results;
  int salt = 1;
  advice = "lower -p";
  for (int p : a.n_prompt) {
    if (p == 0) continue;
    Result r;
    r.n_prompt = p;
    for (double warm = 0; warm < kWarmupFloorNs;) warm += run_pp(*e, p, salt++);  // warm-up
    for (int i = 0; i < a.reps; ++i) r.ns.push_back(run_pp(*e, p, salt++));
    r.peak_rss = peak_rss_bytes();
    results.push_back(r);
  }
  advice = "lower -n or -B";
  for (int n : a.n_gen) {
    if (n == 0) continue;
    for (int b : a.batch) {
      Result r;
      r.n_gen = n;
      r.batch = b;
      // Warm-up. A backend that captures decode graphs (CUDA) captures one per block-table
      // width, which grows with the context: a short warm-up would leave the longer widths'
      // captures (milliseconds each) inside the first timed repetition. So on a backend that has
      // captured any graph (in this warm-up or an earlier test's), a full-length run follows —
      // also when the test is short: CUDA's first step learns which linear follows which (its L2
      // warming plan) while it is captured, so that graph goes stale and the next run's first
      // step captures again. The CPU captures none and skips it. Then more full-length runs
      // while the warm-up has taken less than kWarmupFloorNs (on any backend).
      double warm = run_tg(*e, std::min(n, 16), b, salt++);
      if (e->graphs_captured() > 0) warm += run_tg(*e, n, b, salt++);
      while (warm < kWarmupFloorNs) warm += run_tg(*e, n, b, salt++);
      const uint64_t g1 = e->graphs_captured();
      pool_stats_reset();
      for (int i = 0; i < a.reps; ++i) r.ns.push_back(run_tg(*e, n, b, salt++));
      const uint64_t timed = e->graphs_captured() - g1;
      if (timed > 0)  // CliBench.NoGraphCapture* looks for this text
        std::fprintf(stderr,
                     "perfx: note: %s captured %llu decode graph%s inside its timed repetitions "
                     "(its figure includes their capture)\n",
                     r.name().c_str(), (unsigned long long)timed, timed == 1 ? "" : "s");
      if (pool_stats_enabled()) {
        // PERFX_POOL_STATS=1: where the decode step's time goes between the threads.
        const PoolStats ps = pool_stats();
        double total = 0;
        for (double t : r.ns) total += t;
        const double steps = (double)n * a.reps;
        std::fprintf(stderr,
                     "perfx: %s per step: %.1f forks, %.0f us in parallel loops (threads busy "
                     "%.1f%%, idle %.0f us per thread), %.0f us outside them (one thread), "
                     "step %.0f us\n",
                     r.name().c_str(), (double)ps.loops / steps, (double)ps.region_ns / steps / 1e3,
                     ps.thread_ns ? 100.0 * (double)ps.busy_ns / (double)ps.thread_ns : 0.0,
                     (double)(ps.thread_ns - ps.busy_ns) / steps / 1e3 /
                         std::max(1.0, (double)ps.thread_ns / std::max<double>(1, ps.region_ns)),
                     (total - (double)ps.region_ns) / steps / 1e3, total / steps / 1e3);
      }
      r.peak_rss = peak_rss_bytes();
      results.push_back(r);
    }
  }
  const auto& c = e->config();
  const int64_t n_params =
      c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) +
      c.num_hidden_layers * (c.hidden_size * (c.q_dim() + 2 * c.kv_dim()) +
                             c.q_dim() * c.hidden_size + 3 * c.hidden_size * c.intermediate_size);
  std::string model = eo.model_path;
  while (model.size() > 1 && model.back() == '/') model.pop_back();
  const int n_threads = a.threads > 0 ? a.threads : available_cpus();  // what -t 0 resolves to
  const std::string threads = e->device().rfind("cpu", 0) == 0 ? std::to_string(n_threads) : "-";
  if (a.output == "json") {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      nlohmann::ordered_json j;
      j["build_commit"] = PERFX_GIT_COMMIT;
      j["backends"] = e->device();
      j["model_filename"] = model;
      j["model_type"] = c.model_type;
      j["model_size"] = e->weight_bytes();
      j["model_n_params"] = n_params;
      j["n_threads"] = n_threads;
      j["n_prompt"] = r.n_prompt;
      j["n_gen"] = r.n_gen;
      j["n_batch_seqs"] = r.batch;
      j["lm_head_type"] =
          a.types.lm_head_type.empty() ? "as stored" : a.types.lm_head_type;  // --lm-head-type
      double avg_ns = 0;
      for (double t : r.ns) avg_ns += t / (double)r.ns.size();
      double sd = 0;
      for (double t : r.ns) sd += (t - avg_ns) * (t - avg_ns);
      j["avg_ns"] = (int64_t)avg_ns;
      j["stddev_ns"] = r.ns.size() > 1 ? (int64_t)std::sqrt(sd / (double)(r.ns.size() - 1)) : 0;
      j["avg_ts"] = r.avg_ts();
      j["stddev_ts"] = r.stddev_ts();
      std::vector<int64_t> sn;
      for (double t : r.ns) sn.push_back((int64_t)t);
      j["samples_ns"] = sn;
      j["samples_ts"] = r.samples_ts();
      j["peak_rss_bytes"] = r.peak_rss;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    print_table(*e, results, n_params, threads);
  }
  // stderr, as run's: stdout is the table (or the JSON) alone
  std::fflush(stdout);
  std::fprintf(stderr, "perfx: weight bytes %zu; peak resident memory %s\n", e->weight_bytes(),
               human_bytes(peak_rss_bytes()).c_str());
}

/// "512,1024" -> {512, 1024} (llama-bench accepts comma lists).
std::vector<int> int_list(const std::string& s, const char* flag) {
  const std::string bad =
      std::string(flag) + " expects an integer or a comma-separated list of them, got '" + s + "'";
  std::vector<int> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) {
    try {
      size_t used = 0;
      v.push_back(std::stoi(x, &used));
      check(used == x.size(), "");
    } catch (const std::out_of_range&) {
      throw Error(bad + " (out of range)");
    } catch (const std::exception&) {
      throw Error(bad);
    }
  }
  check(!v.empty() && s.back() != ',', bad);  // getline yields no empty item after a last comma
  return v;
}

Register reg("bench", 55, [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto p = std::make_shared<std::string>("512"), n = std::make_shared<std::string>("128"),
       b = std::make_shared<std::string>("1");
  auto* sub = app.add_subcommand("bench",
                                 "Prompt-processing and generation throughput (llama-bench style)");
  add_model_option(
      sub, &a->model,
      "HF folder, .gguf, or random:SHAPE[:FORMAT] (tinyllama-1.1b, llama-2-7b, llama-2-70b, "
      "mistral-7b; awq, f16, q8_0, q4_0) (default: models/default)");
  sub->add_option("-p,--n-prompt", *p, "Prompt tokens per pp test (comma list; 0 = no pp test)")
      ->capture_default_str();
  sub->add_option("-n,--n-gen", *n, "Generated tokens per tg test (comma list; 0 = no tg test)")
      ->capture_default_str();
  sub->add_option("-B,--batch-seqs", *b, "Sequences decoding together in tg tests (comma list)")
      ->capture_default_str();
  sub->add_option("-r,--repetitions", a->reps, "Repetitions of each test")->capture_default_str();
  add_type_options(sub, &a->types);
  sub->add_option("-t,--threads", a->threads, "CPU threads (0 = all usable)")
      ->capture_default_str();
  sub->add_option("--device", a->device, "Backend: cpu, cuda[:N], opencl[:N]")
      ->capture_default_str();
  add_max_alloc_option(sub);
  sub->add_option("-o,--output", a->output, "md or json")->capture_default_str();
  sub->callback([a, p, n, b] {
    a->n_prompt = int_list(*p, "-p/--n-prompt");
    a->n_gen = int_list(*n, "-n/--n-gen");
    a->batch = int_list(*b, "-B/--batch-seqs");
    // The library's out-of-memory errors end with what to lower in run's and serve's flags
    // (kLowerMemoryAdvice): say what to lower in bench's.
    std::string advice;
    try {
      bench(*a, advice);
    } catch (const Error& e) {
      std::string m = e.what();
      const size_t at = m.find(kLowerMemoryAdvice);
      if (at == std::string::npos || advice.empty()) throw;
      throw Error(m.replace(at, std::string(kLowerMemoryAdvice).size(), advice));
    }
  });
});

}  // namespace
}  // namespace perfx::cli
