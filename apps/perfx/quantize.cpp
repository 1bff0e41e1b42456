// perfx quantize: an fp checkpoint -> an AutoAWQ GEMM int4 checkpoint (AWQ or RTN, W4A16 g128).
#include "quant/quantize.h"

#include <cstdio>

#include "common.h"
#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct QuantizeArgs {
  std::string model, output, method = "awq", calib;
  int w_bit = 4, group_size = 128, n_samples = 128, seq_len = 512, threads = 0;
  bool no_duo = false, no_clip = false;
};

void run_quantize(const QuantizeArgs& a) {
  check(!a.output.empty(), "-o OUT is required");
  quant::QuantizeOptions o;
  o.input = a.model.empty() ? default_model_path() : a.model;
  o.output = a.output;
  o.method = a.method;
  o.w_bit = a.w_bit;
  o.group_size = a.group_size;
  o.calib_path = a.calib;
  o.n_samples = a.n_samples;
  o.seq_len = a.seq_len;
  o.n_threads = a.threads;
  o.duo_scaling = !a.no_duo;
  o.clip = !a.no_clip;
  check(a.n_samples >= 1, "--n-samples must be >= 1, got " + std::to_string(a.n_samples));
  check(a.seq_len >= 1, "--seq-len must be >= 1, got " + std::to_string(a.seq_len));
  check(a.threads >= 0, "-t must be >= 0");
  std::unique_ptr<Tokenizer> tok;
  if (o.method == "awq") {
    tok = load_tokenizer_only(o.input);
    o.tokenizer = tok.get();
  }
  const quant::QuantizeSummary s = quant::quantize_model(o);
  for (size_t l = 0; l < s.layer_reports.size(); ++l) {
    const auto& r = s.layer_reports[l];
    std::fprintf(stderr, "quantize: layer %2zu alpha", l);
    for (int g = 0; g < 4; ++g) {
      if (r.best_ratio[g] < 0)
        std::fprintf(stderr, "   -   ");
      else
        std::fprintf(stderr, " %.2f", r.best_ratio[g]);
    }
    std::fprintf(stderr, "  loss/RTN");
    for (int g = 0; g < 4; ++g)
      if (r.best_ratio[g] >= 0 && r.rtn_loss[g] > 0)
        std::fprintf(stderr, " %.3f", r.best_loss[g] / r.rtn_loss[g]);
    std::fprintf(stderr, "\n");
  }
  bool has_tokenizer = false;
  for (const std::string& f : s.files)
    has_tokenizer |= f == "tokenizer.json" || f == "tokenizer.gguf";
  if (!has_tokenizer)
    std::fprintf(stderr,
                 "quantize: note: no tokenizer was written (none in the input); copy the model's "
                 "tokenizer.json / tokenizer_config.json into %s\n",
                 o.output.c_str());
  for (const std::string& f : s.files)
    if (f == "tokenizer.gguf")
      std::fprintf(stderr,
                   "quantize: note: the GGUF's tokenizer was kept as %s/tokenizer.gguf (perfx reads "
                   "it; other tools need the model's tokenizer.json)\n",
                   o.output.c_str());
  std::fprintf(stderr,
               "quantize: %s w%d g%d: %lld linears int4, %zu kept fp16; wrote %s of tensors to %s "
               "in %.1f s (peak RSS %s)\n",
               o.method.c_str(), o.w_bit, o.group_size,
               static_cast<long long>(s.n_linears_quantized), s.not_converted.size(),
               human_bytes(s.output_bytes).c_str(), o.output.c_str(), s.seconds,
               human_bytes(peak_rss_bytes()).c_str());
}

Register reg("quantize", 30, [](CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* sub = app.add_subcommand(
      "quantize", "Quantize an fp16/bf16 checkpoint to AWQ int4 (AutoAWQ GEMM format, W4A16)");
  add_model_option(sub, &a->model,
                   "Input: HF checkpoint folder or .gguf file (default: models/default)");
  sub->add_option("-o,--output", a->output, "Output folder (created; must be empty)");
  sub->add_option("--method", a->method, "awq | rtn")->capture_default_str();
  sub->add_option("--w-bit", a->w_bit, "Weight bits (4)")->capture_default_str();
  sub->add_option("--group-size", a->group_size, "Input channels per scale/zero group")
      ->capture_default_str();
  sub->add_option("--calib", a->calib,
                  "Calibration text, one sample per non-empty line (default: <model>/calib.txt)");
  sub->add_option("--n-samples", a->n_samples, "Calibration samples")->capture_default_str();
  sub->add_option("--seq-len", a->seq_len, "Calibration block length in tokens")
      ->capture_default_str();
  sub->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  sub->add_flag("--no-duo-scaling", a->no_duo, "Scale search with s = x_mean^a only (llm-awq)");
  sub->add_flag("--no-clip", a->no_clip, "Skip the weight clipping search");
  sub->callback([a] { run_quantize(*a); });
});

}  // namespace
}  // namespace perfx::cli
