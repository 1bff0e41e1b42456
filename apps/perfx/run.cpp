// perfx run: generate text from a prompt (llama.cpp's flag names where they exist).
#include <chrono>
#include <cstdio>
#include <random>

#include "backend/backend.h"
#include "common.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct RunArgs {
  std::string model, prompt, dump_logits, device = "cpu";
  int n_predict = 128, threads = 0, ctx = 0;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  float presence_penalty = 0, frequency_penalty = 0;
  int top_k = 40, repeat_last_n = 64;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

void dump_logits(Engine& e, const std::vector<int32_t>& ids, const std::string& path) {
  const SeqId s = e.create_sequence();
  std::vector<float> logits;
  try {
    e.step({Engine::StepItem{s, ids, true, true}}, logits);
  } catch (...) {
    e.release_sequence(s);
    throw;
  }
  e.release_sequence(s);
  TensorView in;
  in.name = "input_ids";
  in.dtype = DType::I32;
  in.shape = {(int64_t)ids.size()};
  in.data = ids.data();
  in.nbytes = ids.size() * 4;
  TensorView lg;
  lg.name = "logits";
  lg.dtype = DType::F32;
  lg.shape = {(int64_t)ids.size(), e.config().vocab_size};
  lg.data = logits.data();
  lg.nbytes = logits.size() * 4;
  write_safetensors(path, {in, lg});
  std::fprintf(stderr, "perfx: wrote logits [%zu, %lld] to %s\n", ids.size(), (long long)e.config().vocab_size,
               path.c_str());
}

void run(const RunArgs& a) {
  check(a.n_predict >= -1, "-n must be >= -1 (-1: until EOS or the context is full), got " +
                               std::to_string(a.n_predict));
  check(a.temp >= 0, "--temp must be >= 0");
  check(a.top_p > 0 && a.top_p <= 1, "--top-p must be in (0, 1]");
  check(a.min_p >= 0 && a.min_p <= 1, "--min-p must be in [0, 1]");
  check(a.repeat_penalty > 0, "--repeat-penalty must be > 0");
  const auto t0 = std::chrono::steady_clock::now();
  EngineOptions eo;
  eo.model_path = a.model.empty() ? default_model_path() : a.model;
  eo.device = a.device;
  eo.n_threads = a.threads;
  eo.ctx = a.ctx;
  auto engine = Engine::load(eo);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "perfx: loaded %s (%s, %lld layers) in %.2f s; weights %s on %s\n",
               engine->model_name().c_str(), engine->config().model_type.c_str(),
               (long long)engine->config().num_hidden_layers, load_s, human_bytes(engine->weight_bytes()).c_str(),
               engine->backend().name().c_str());

  const std::vector<int32_t> ids = encode_prompt(engine->tokenizer(), a.prompt);
  if (!a.dump_logits.empty()) dump_logits(*engine, ids, a.dump_logits);

  Engine::GenerateOptions go;
  go.max_tokens = a.n_predict < 0 ? engine->ctx() : a.n_predict;
  go.sampling.temperature = a.temp;
  go.sampling.top_k = a.top_k;
  go.sampling.top_p = a.top_p;
  go.sampling.min_p = a.min_p;
  go.sampling.repeat_penalty = a.repeat_penalty;
  go.sampling.repeat_last_n = a.repeat_last_n;
  go.sampling.presence_penalty = a.presence_penalty;
  go.sampling.frequency_penalty = a.frequency_penalty;
  go.sampling.seed = a.seed >= 0 ? (uint64_t)a.seed : std::random_device{}();
  go.stop = a.stop;
  go.ignore_eos = a.ignore_eos;
  if (go.max_tokens == 0) return;
  auto r = engine->generate(ids, go, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const size_t n_out = r.output_ids.size();
  std::fprintf(stderr,
               "perfx: prompt %d tokens in %.3f s (%.2f tokens/s); generated %zu tokens in %.3f s (%.2f tokens/s); "
               "finish: %s\n",
               r.prompt_tokens, r.prefill_seconds, r.prompt_tokens / std::max(r.prefill_seconds, 1e-9), n_out,
               r.decode_seconds, n_out / std::max(r.decode_seconds, 1e-9), r.finish_reason.c_str());
  std::fprintf(stderr, "perfx: weight bytes %zu (%s); peak resident memory %s\n", engine->weight_bytes(),
               human_bytes(engine->weight_bytes()).c_str(), human_bytes(peak_rss_bytes()).c_str());
}

Register reg("run", 10, [](CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Generate text from a prompt");
  sub->add_option("-m,--model", a->model, "HF checkpoint folder or .gguf file (default: models/default)");
  sub->add_option("-p,--prompt", a->prompt, "Prompt text (\"\" = start from BOS)");
  sub->add_option("-n,--n-predict", a->n_predict, "Tokens to generate (-1: until EOS/context end)")->capture_default_str();
  sub->add_option("--temp", a->temp, "Temperature (0 = greedy)")->capture_default_str();
  sub->add_option("--top-k", a->top_k, "Top-k (0 = off)")->capture_default_str();
  sub->add_option("--top-p", a->top_p, "Top-p (1 = off)")->capture_default_str();
  sub->add_option("--min-p", a->min_p, "Min-p (0 = off)")->capture_default_str();
  sub->add_option("--repeat-penalty", a->repeat_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  sub->add_option("--repeat-last-n", a->repeat_last_n, "Penalty window (-1 = all)")->capture_default_str();
  sub->add_option("--presence-penalty", a->presence_penalty, "Presence penalty")->capture_default_str();
  sub->add_option("--frequency-penalty", a->frequency_penalty, "Frequency penalty")->capture_default_str();
  sub->add_option("-s,--seed", a->seed, "RNG seed (-1 = random)")->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  sub->add_option("-c,--ctx-size", a->ctx, "Context size (0 = model's, at most 4096)")->capture_default_str();
  sub->add_option("--stop", a->stop, "Stop string (repeatable)");
  sub->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at EOS");
  sub->add_option("--device", a->device, "Backend: cpu")->capture_default_str();
  sub->add_option("--dump-logits", a->dump_logits,
                  "Write the prompt's logits after prefill as safetensors (input_ids i32 [T], logits f32 [T, vocab])");
  sub->callback([a] { run(*a); });
});

}  // namespace
}  // namespace perfx::cli
