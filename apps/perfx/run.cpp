// perfx run: generate text from a prompt (llama.cpp's flag names where they exist).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "common.h"
#include "core/mmap.h"
#include "formats/safetensors.h"
#include "perfx/model_config.h"
#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct RunArgs {
  TypeFlags types;  // --cache-type-k / -v, --kv-cache-dtype, --lm-head-type
  std::string model, prompt, prompt_file, dump_logits, device = "cpu";
  bool prompt_given = false;  // -p was on the command line
  int n_predict = 128, threads = 0, ctx = 0;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  float presence_penalty = 0, frequency_penalty = 0;
  int top_k = 40, repeat_last_n = 64;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

void dump_logits(Engine& e, const std::vector<int32_t>& ids, const std::string& path) {
  std::vector<float> logits;
  e.prompt_logits(ids, logits);
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
  std::fprintf(stderr, "perfx: wrote logits [%zu, %lld] to %s\n", ids.size(),
               (long long)e.config().vocab_size, path.c_str());
}

// The sampling flags as SamplingParams, validated; perfx::Error naming the flag when one is out of
// range.
SamplingParams sampling_params(const RunArgs& a) {
  SamplingParams p;
  p.temperature = a.temp;
  p.top_k = a.top_k;
  p.top_p = a.top_p;
  p.min_p = a.min_p;
  p.repeat_penalty = a.repeat_penalty;
  p.repeat_last_n = a.repeat_last_n;
  p.presence_penalty = a.presence_penalty;
  p.frequency_penalty = a.frequency_penalty;
  p.seed = a.seed >= 0 ? (uint64_t)a.seed : std::random_device{}();
  try {
    p.validate();
  } catch (const InvalidSamplingParam& e) {
    // The flag's name: the field's with dashes (top_p -> --top-p), but temperature is --temp.
    std::string flag = e.field() == "temperature" ? "temp" : e.field();
    std::replace(flag.begin(), flag.end(), '_', '-');
    throw Error("--" + flag + " " + e.reason());
  }
  return p;
}

void run(const RunArgs& a) {
  check(a.n_predict >= -1, "-n must be >= -1 (-1: until EOS or the context is full), got " +
                               std::to_string(a.n_predict));
  check(a.seed >= -1,
        "--seed must be >= 0, or -1 for a random seed, got " + std::to_string(a.seed));
  const SamplingParams sampling = sampling_params(a);
  const std::string prompt = prompt_text(a.prompt, a.prompt_file, a.prompt_given);
  if (!a.dump_logits.empty()) {  // before the model loads, not after
    check(!is_directory(a.dump_logits), "--dump-logits: '" + a.dump_logits +
                                            "' is a folder; give a file path such as '" +
                                            a.dump_logits + "/logits.safetensors'");
    const std::string parent = std::filesystem::path(a.dump_logits).parent_path().string();
    check(parent.empty() || is_directory(parent),
          "--dump-logits: the folder '" + parent + "' does not exist (create it first)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  EngineOptions eo;
  eo.model_path = a.model.empty() ? default_model_path() : a.model;
  eo.tokenizer_path = tokenizer_override(eo.model_path);
  eo.device = a.device;
  eo.n_threads = a.threads;
  a.types.apply(eo);
  eo.ctx = a.ctx;
  warn_if_oversubscribed(a.threads);
  auto engine = Engine::load(eo);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "perfx: loaded %s (%s, %lld layers) in %.2f s; weights %s on %s\n",
               engine->model_name().c_str(), engine->config().model_type.c_str(),
               (long long)engine->config().num_hidden_layers, load_s,
               human_bytes(engine->weight_bytes()).c_str(), engine->device().c_str());

  // -c past the trained context is allowed (the user asked for it), with a warning; -n -1 then
  // stops at the trained context, so that it ends in the time the model is good for.
  const int64_t trained = engine->config().trained_context();
  warn_past_trained_context(*engine,
                            a.n_predict < 0 ? "; -n -1 stops there (give -n N to go further)" : "");

  const std::vector<int32_t> ids = prompt_ids(engine->tokenizer(), prompt);
  if (!a.dump_logits.empty()) dump_logits(*engine, ids, a.dump_logits);

  Engine::GenerateOptions go;
  go.max_tokens = a.n_predict;
  if (a.n_predict < 0) {  // until EOS or the context is full (generate() stops there)
    go.max_tokens = engine->ctx();
    if (engine->ctx() > trained) {
      go.max_tokens = (int)(trained - (int64_t)ids.size());
      check(go.max_tokens > 0, "the prompt (" + std::to_string(ids.size()) +
                                   " tokens) already fills the model's trained context " +
                                   std::to_string(trained) + "; give -n N to generate past it");
    }
  }
  go.sampling = sampling;
  go.stop = a.stop;
  go.ignore_eos = a.ignore_eos;
  if (go.max_tokens == 0) {  // say so: otherwise the load line is all a user sees
    std::fprintf(stderr, "perfx: prompt %zu tokens; nothing generated (-n 0)\n", ids.size());
    return;
  }
  if (a.seed < 0 && sampling.temperature > 0)  // so that a random run can be repeated
    std::fprintf(stderr, "perfx: seed %llu (random; --seed %llu repeats this run)\n",
                 (unsigned long long)sampling.seed, (unsigned long long)sampling.seed);
  auto r = engine->generate(ids, go, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const size_t n_out = r.output_ids.size();
  // A context limit, not -n, EOS or a stop string, ended it: say so (llama.cpp does too).
  if (r.context_full)
    std::fprintf(stderr,
                 "perfx: note: generation stopped at the context size (%d tokens) after %zu "
                 "token%s%s; give a larger -c for more\n",
                 engine->ctx(), n_out, n_out == 1 ? "" : "s",
                 a.n_predict < 0 ? "" : (", short of -n " + std::to_string(a.n_predict)).c_str());
  else if (a.n_predict < 0 && go.max_tokens < engine->ctx() - (int)ids.size() &&
           r.finish_reason == "length" && (int)n_out == go.max_tokens)
    std::fprintf(stderr,
                 "perfx: note: generation stopped at the model's trained context (%lld tokens) "
                 "after %zu token%s, as -n -1 does; give -n N to generate past it\n",
                 (long long)trained, n_out, n_out == 1 ? "" : "s");
  std::fprintf(stderr,
               "perfx: prompt %d tokens in %.3f s (%.2f tokens/s); generated %zu tokens in %.3f s "
               "(%.2f tokens/s); "
               "finish: %s\n",
               r.prompt_tokens, r.prefill_seconds,
               r.prompt_tokens / std::max(r.prefill_seconds, 1e-9), n_out, r.decode_seconds,
               n_out / std::max(r.decode_seconds, 1e-9), r.finish_reason.c_str());
  std::fprintf(stderr, "perfx: weight bytes %zu (%s); peak resident memory %s\n",
               engine->weight_bytes(), human_bytes(engine->weight_bytes()).c_str(),
               human_bytes(peak_rss_bytes()).c_str());
}

Register reg("run", 10, [](CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Generate text from a prompt");
  add_model_option(sub, &a->model, "HF checkpoint folder or .gguf file (default: models/default)");
  sub->add_option("-p,--prompt", a->prompt, "Prompt text (\"\" = start from BOS)")
      ->each([a](const std::string&) { a->prompt_given = true; });
  sub->add_option("-f,--file", a->prompt_file,
                  "Read the prompt from a text file (one trailing newline dropped)");
  sub->add_option("-n,--n-predict", a->n_predict,
                  "Tokens to generate (-1: until EOS/context end, at most the trained context)")
      ->capture_default_str();
  sub->add_option("--temp", a->temp, "Temperature (0 = greedy)")->capture_default_str();
  sub->add_option("--top-k", a->top_k, "Top-k (0 or -1 = off)")->capture_default_str();
  sub->add_option("--top-p", a->top_p, "Top-p (1 = off)")->capture_default_str();
  sub->add_option("--min-p", a->min_p, "Min-p (0 = off)")->capture_default_str();
  sub->add_option("--repeat-penalty", a->repeat_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str();
  sub->add_option("--repeat-last-n", a->repeat_last_n, "Penalty window (-1 = all)")
      ->capture_default_str();
  sub->add_option("--presence-penalty", a->presence_penalty, "Presence penalty")
      ->capture_default_str();
  sub->add_option("--frequency-penalty", a->frequency_penalty, "Frequency penalty")
      ->capture_default_str();
  sub->add_option("-s,--seed", a->seed, "RNG seed (-1 = random)")->capture_default_str();
  add_type_options(sub, &a->types);
  sub->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  sub->add_option("-c,--ctx-size", a->ctx,
                  "Context size (0 = model's, at most 4096; more than the model's trained context "
                  "warns)")
      ->capture_default_str();
  sub->add_option("--stop", a->stop, "Stop string (repeatable)")
      // as the server's "stop": an empty one would match at once
      ->each(refuse_empty("--stop must not be an empty string"));
  sub->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at EOS");
  sub->add_option("--device", a->device, "Backend: cpu, cuda[:N] or opencl[:N]")
      ->capture_default_str();
  add_max_alloc_option(sub);
  sub->add_option("--dump-logits", a->dump_logits,
                  "Write the prompt's logits after prefill as safetensors (input_ids i32 [T], "
                  "logits f32 [T, vocab])")
      // an empty path was taken as "not given"
      ->each(refuse_empty("--dump-logits needs a file path, got an empty string"));
  sub->callback([a] { run(*a); });
});

}  // namespace
}  // namespace perfx::cli
