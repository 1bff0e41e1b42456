// perfx perplexity: llama.cpp's perplexity (non-overlapping windows of -c tokens, second half of
// each scored) of a model on a text file. Progress on stderr: one line redrawn in place on a
// terminal, else a line per 10% of the windows. The last line on stdout is
// "PPL = X.XXXX +/- Y.YYYY".
#include "quant/perplexity.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "common.h"
#include "core/mmap.h"
#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct PplArgs {
  TypeFlags types;  // --cache-type-k / -v, --kv-cache-dtype, --lm-head-type
  std::string model, file, device = "cpu";
  int ctx = 512, threads = 0, chunks = 0;
};

void run_perplexity(const PplArgs& a) {
  check(!a.file.empty(), "-f TEXT is required");
  check(a.ctx == 0 || a.ctx >= 4,
        "-c must be at least 4 (or 0: the model's context), got " + std::to_string(a.ctx));
  check(a.threads >= 0, "-t must be >= 0");
  check(a.chunks >= 0, "--chunks must be >= 0");
  const std::string text = read_text_file(a.file);
  // (An empty file would otherwise read as "1 token": the BOS the tokenizer adds.)
  check(text.find_first_not_of(" \t\r\n") != std::string::npos,
        "-f '" + a.file + "' has no text to score (it is empty or only whitespace)");
  EngineOptions eo;
  eo.model_path = a.model.empty() ? default_model_path() : a.model;
  eo.tokenizer_path = tokenizer_override(eo.model_path);
  eo.device = a.device;
  eo.n_threads = a.threads;
  a.types.apply(eo);
  eo.ctx = a.ctx;
  eo.kv_cache_tokens = a.ctx;
  warn_if_oversubscribed(a.threads);
  auto engine = Engine::load(eo);
  warn_past_trained_context(*engine);
  const int ctx = engine->ctx();  // -c, or with -c 0 the engine's default (the model's context)
  const Tokenizer& tok = engine->tokenizer();
  const bool add_bos = tok.add_bos_by_default() && tok.bos_id() >= 0;
  const std::vector<int32_t> ids = tok.encode(text, add_bos);
  quant::check_perplexity_tokens(ids.size(), ctx);  // a short text: the error, not the header
  std::fprintf(stderr, "perplexity: %s: %zu tokens, ctx %d, %zu windows, weights %s\n",
               eo.model_path.c_str(), ids.size(), ctx, ids.size() / static_cast<size_t>(ctx),
               human_bytes(engine->weight_bytes()).c_str());
  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  const quant::PerplexityResult r = quant::evaluate_perplexity(
      *engine, ids, ctx, add_bos ? tok.bos_id() : -1, a.chunks,
      [&](int i, int n, const quant::PerplexityResult& run) {
        // A terminal gets one line redrawn in place; a pipe or file a line per 10% of the windows.
        if (!tty && i != n && i * 10 / n == (i - 1) * 10 / n) return;
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "%sperplexity: [%d/%d] PPL %.4f  (%.1f s, %.0f tokens/s)%s",
                     tty ? "\r\033[K" : "", i, n, run.ppl, s, static_cast<double>(i) * ctx / s,
                     tty && i != n ? "" : "\n");
        std::fflush(stderr);
      });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "perplexity: %d windows, %lld tokens scored, mean NLL %.5f, %.1f s, peak RSS %s\n",
               r.n_chunks, static_cast<long long>(r.n_scored), r.mean_nll, s,
               human_bytes(peak_rss_bytes()).c_str());
  std::printf("PPL = %.4f +/- %.4f\n", r.ppl, r.ppl_error);
  std::fflush(stdout);
}

Register reg("perplexity", 40, [](CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  auto* sub = app.add_subcommand(
      "perplexity",
      "Perplexity on a text file (llama.cpp definition: windows of -c tokens, second half scored)");
  add_model_option(sub, &a->model, "HF checkpoint folder or .gguf file (default: models/default)");
  sub->add_option("-f,--file", a->file, "Text file to evaluate");
  sub->add_option("-c,--ctx-size", a->ctx, "Window (context) size in tokens (0 = the model's context)")
      ->capture_default_str();
  sub->add_option("--chunks", a->chunks, "Evaluate at most this many windows (0 = all)")
      ->capture_default_str();
  add_type_options(sub, &a->types);
  sub->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  sub->add_option("--device", a->device, "Backend: cpu, cuda[:N] or opencl[:N]")->capture_default_str();
  add_max_alloc_option(sub);
  sub->callback([a] { run_perplexity(*a); });
});

}  // namespace
}  // namespace perfx::cli
