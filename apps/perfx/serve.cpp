// perfx serve: the OpenAI-compatible HTTP server with continuous batching.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "common.h"
#include "model/weights.h"
#include "perfx/engine.h"
#include "perfx/model_config.h"
#include "perfx/status.h"
#include "server/completions.h"
#include "server/http.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "subcommand.h"
#include "tokenizer/chat_template.h"

namespace perfx::cli {
namespace {

struct ServeArgs {
  TypeFlags types;  // --cache-type-k / -v, --kv-cache-dtype, --lm-head-type
  std::string model, host = "127.0.0.1", api_key, chat_template, device = "cpu", model_name;
  int port = 8080, max_batch = 64, kv_cache_tokens = 0, ctx = 0, threads = 0, max_queue = 256;
  int prefill_chunk = 512, kv_cache_mib = 2048, max_connections = 0, max_num_batched_tokens = 0;
  double timeout_s = 600, max_body_mib = 4, gpu_memory_utilization = 0.9;
  bool api_key_given = false;
};

// Default KV capacity: room for every batch slot at full context, within --kv-cache-mib.
int default_kv_tokens(const ServeArgs& a, const ModelConfig& c) {
  const int ctx = a.ctx > 0 ? a.ctx : (int)std::min<int64_t>(c.max_position_embeddings, 4096);
  const double bytes_per_token =
      2.0 * (double)c.num_hidden_layers * (double)c.num_key_value_heads * (double)c.head_dim * 4.0;
  const double budget_tokens = (double)a.kv_cache_mib * 1024.0 * 1024.0 / bytes_per_token;
  const double want = (double)a.max_batch * ctx;
  return (int)std::max<double>(ctx, std::min(want, budget_tokens));
}

void serve(ServeArgs a) {
  check(a.max_batch >= 1 && a.max_batch <= 4096,
        "--max-batch must be 1..4096, got " + std::to_string(a.max_batch));
  check(a.max_queue >= 0, "--max-queue must be >= 0");
  check(a.kv_cache_tokens >= 0, "--kv-cache-tokens must be >= 0");
  check(a.ctx >= 0, "-c/--ctx-size must be >= 0");
  check(a.prefill_chunk >= 1, "--prefill-chunk must be >= 1");
  // Every step must fit one token of each running sequence and one whole prompt chunk (chunks end
  // on multiples of --prefill-chunk, which keeps the numerics of a prompt independent of the load).
  check(a.max_num_batched_tokens == 0 ||
            (a.max_num_batched_tokens >= a.max_batch + a.prefill_chunk &&
             a.max_num_batched_tokens <= (1 << 20)),
        "--max-num-batched-tokens must be 0 (the default) or from --max-batch + --prefill-chunk = " +
            std::to_string(a.max_batch + a.prefill_chunk) + " up to 1048576, got " +
            std::to_string(a.max_num_batched_tokens));
  // Bounded so that a deadline or a byte count computed from them cannot overflow (1e10 s made
  // every request time out at once; 1e30 MiB made every body too large).
  server::check_seconds("--timeout", a.timeout_s);
  check(a.max_body_mib > 0 && a.max_body_mib <= 4096,
        "--max-body-mib must be in (0, 4096], got " + fmt_number(a.max_body_mib));
  check(!a.api_key_given || !a.api_key.empty(),
        "--api-key is empty (an unset variable?); give a key, or leave the flag out for no "
        "authentication");
  check(a.kv_cache_mib >= 1, "--kv-cache-mib must be >= 1");
  // Each connection has a thread, all started at once: 4096 is far beyond what a batch of at most
  // 4096 sequences needs, and a larger value would mostly test the process's thread limit.
  check(a.max_connections >= 0 && a.max_connections <= 4096,
        "--max-connections must be 0..4096 (0: max batch + max queue + 32), got " +
            std::to_string(a.max_connections));

  // Signals go to one waiting thread (blocked everywhere else, including engine threads).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  check(a.gpu_memory_utilization > 0 && a.gpu_memory_utilization <= 1,
        "--gpu-memory-utilization must be in (0, 1], got " + std::to_string(a.gpu_memory_utilization));
  EngineOptions eo;
  eo.model_path = a.model;
  eo.tokenizer_path = tokenizer_override(a.model);
  eo.device = a.device;
  eo.n_threads = a.threads;
  a.types.apply(eo);
  eo.ctx = a.ctx;
  // A GPU: the KV cache takes what --gpu-memory-utilization leaves (vLLM); the CPU: room for every
  // batch slot at full context within --kv-cache-mib.
  const bool gpu = a.device.rfind("cuda", 0) == 0;
  eo.gpu_memory_utilization = a.gpu_memory_utilization;
  // The step budget: on CUDA 4096 tokens by default (7B on an H200, 256 clients: TTFT p99 198 vs
  // 980 ms and 15,220 vs 13,635 output tok/s against the least budget, docs/SERVING.md), on
  // other devices the least (a prompt chunk beside every decoding sequence).
  const int least_step = a.max_batch + a.prefill_chunk;
  const int step_tokens = a.max_num_batched_tokens > 0 ? a.max_num_batched_tokens
                          : a.device.rfind("cuda", 0) == 0 ? std::max(4096, least_step)
                                                           : least_step;
  eo.max_step_tokens = step_tokens;
  eo.kv_cache_tokens = a.kv_cache_tokens > 0 ? a.kv_cache_tokens
                       : gpu               ? 0
                                           : default_kv_tokens(a, open_checkpoint(a.model).config);
  warn_if_oversubscribed(a.threads);
  std::unique_ptr<Engine> engine = Engine::load(eo);
  warn_past_trained_context(*engine);

  // Chat template: --chat-template, else the model's, else ChatML.
  std::unique_ptr<ChatTemplate> tpl;
  std::string tpl_error, tpl_origin;
  if (!a.chat_template.empty()) {
    tpl = std::make_unique<ChatTemplate>(load_chat_template(a.chat_template));
    tpl_origin = a.chat_template;
  } else if (!engine->tokenizer().chat_template().empty()) {
    try {
      tpl = std::make_unique<ChatTemplate>(engine->tokenizer().chat_template());
      tpl_origin = "the model's tokenizer_config.json";
    } catch (const Error& e) {
      tpl_error = std::string("The model's chat template cannot be used (") + e.what() +
                  "); start the server with --chat-template FILE.";
      std::fprintf(stderr, "perfx serve: warning: %s\n", tpl_error.c_str());
    }
  } else {
    tpl = std::make_unique<ChatTemplate>(builtin_chat_template("chatml"));
    tpl_origin = "built-in chatml (the model has none)";
  }

  server::Metrics metrics;
  server::SchedulerOptions so;
  so.max_batch = a.max_batch;
  so.max_queue = a.max_queue;
  so.prefill_chunk = a.prefill_chunk;
  so.max_step_tokens = step_tokens;
  so.request_timeout_s = a.timeout_s;
  server::Scheduler scheduler(*engine, so, &metrics);
  const std::string model_id = a.model_name.empty() ? engine->model_name() : a.model_name;
  server::CompletionService service(*engine, scheduler, std::move(tpl), model_id, tpl_error);
  server::HttpOptions ho;
  ho.api_key = a.api_key;
  ho.max_body_bytes = (size_t)(a.max_body_mib * 1024 * 1024);
  ho.max_connections = a.max_connections;
  server::HttpServer http(service, scheduler, metrics, ho);
  const int port = http.bind(a.host, a.port);
  scheduler.start();

  std::atomic<bool> done{false};
  std::thread waiter([&] {
    const timespec slice{0, 100 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&sigs, nullptr, &slice);
      if (sig == SIGINT || sig == SIGTERM) {
        std::fprintf(stderr, "perfx serve: signal %d, shutting down\n", sig);
        http.stop();       // no new connections; idle keep-alive connections close
        scheduler.stop();  // in-flight requests end now: finish_reason "abort" (queued: 503)
        return;
      }
    }
  });
  std::fprintf(stderr,
               "perfx serve: model '%s' (ctx %d, KV cache %d blocks of %d tokens, max batch %d), "
               "chat template: %s\n",
               model_id.c_str(), engine->ctx(), engine->total_blocks(), engine->block_size(),
               a.max_batch, tpl_origin.empty() ? "none" : tpl_origin.c_str());
  std::printf("perfx serve: listening on http://%s:%d\n", a.host.c_str(), port);
  std::fflush(stdout);
  http.run();
  done = true;
  waiter.join();
  scheduler.stop();
}

static Register reg("serve", 50, [](CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  a->model = default_model_path();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_model_option(sub, &a->model, "model: HF folder or .gguf file (default: models/default)");
  sub->add_option("--host", a->host, "address to bind (default 127.0.0.1)");
  sub->add_option("--port", a->port, "port (default 8080; 0 picks a free one)");
  sub->add_option("--api-key", a->api_key, "require 'Authorization: Bearer KEY' on the API")
      ->each([a](const std::string&) { a->api_key_given = true; });
  sub->add_option("--max-batch", a->max_batch, "sequences in the running batch (default 64)");
  sub->add_option("--kv-cache-tokens", a->kv_cache_tokens,
                  "KV cache capacity in tokens over all sequences (default: max-batch x ctx, "
                  "within --kv-cache-mib)");
  sub->add_option("--kv-cache-mib", a->kv_cache_mib,
                  "memory budget for the default KV capacity (default 2048)");
  sub->add_option("-c,--ctx-size,--ctx", a->ctx,
                  "context size per sequence (default: the model's, <= 4096)");
  sub->add_option("--chat-template", a->chat_template,
                  "chat template: a Jinja file, a tokenizer_config.json, or one of chatml, llama2, "
                  "llama3, mistral, zephyr");
  add_type_options(sub, &a->types);
  sub->add_option("-t,--threads", a->threads, "compute threads (default: all cores)");
  sub->add_option("--device", a->device, "backend: cpu (default), cuda[:N] or opencl[:N]");
  add_max_alloc_option(sub);
  sub->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                  "GPU: fraction of the GPU's memory for weights, activations and the KV cache, which "
                  "takes what the others leave (vLLM's flag; default 0.9; --kv-cache-tokens overrides)");
  sub->add_option("--max-queue", a->max_queue,
                  "sequences that may wait for a batch slot; more get 429 (default 256)");
  sub->add_option("--prefill-chunk", a->prefill_chunk,
                  "prompt tokens per sequence per step (default 512)");
  sub->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                  "tokens per step over all sequences: one per decoding sequence, then whole "
                  "prompt chunks while it lasts (vLLM's flag; at least --max-batch + "
                  "--prefill-chunk; default that on the CPU, 4096 or that on CUDA)");
  sub->add_option("--timeout", a->timeout_s,
                  "seconds a request may take before it is ended (default 600; 0: no limit)");
  sub->add_option("--max-body-mib", a->max_body_mib, "largest request body in MiB (default 4)");
  sub->add_option("--max-connections", a->max_connections,
                  "client connections open at once, 1..4096 (each has a thread, so this also "
                  "bounds concurrent requests); more get 503 (default: max batch + max queue + "
                  "32)");
  sub->add_option("--model-name", a->model_name,
                  "model id in the API (default: the model folder's name)");
  sub->callback([a] { serve(*a); });
});

}  // namespace
}  // namespace perfx::cli
