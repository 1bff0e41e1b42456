#include "common.h"

#include <sys/resource.h>

#include <cstdio>

#include "core/mmap.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "perfx/model_config.h"
#include "model/weights.h"
#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {

std::string tokenizer_override(const std::string& model_path) {
  return model_path.rfind("random:", 0) == 0 ? default_model_path() : std::string();
}

size_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return (size_t)ru.ru_maxrss * 1024;
}

std::string fmt_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string human_bytes(size_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

std::unique_ptr<Tokenizer> load_tokenizer_only(const std::string& path) {
  check(path_exists(path), "model path '" + path + "' does not exist");
  if (is_directory(path)) return Tokenizer::from_hf_dir(path);
  check_gguf_magic(path);
  auto g = gguf::File::open(path);
  return Tokenizer::from_gguf(*g);
}

void warn_if_oversubscribed(int threads) {
  const int cpus = available_cpus();
  if (threads <= cpus || threads > 1024) return;
  std::fprintf(stderr,
               "perfx: warning: -t %d is more than the %d CPUs this process may use; it runs "
               "slower than -t 0 (one thread per CPU)\n",
               threads, cpus);
}

bool warn_past_trained_context(Engine& engine, const std::string& note) {
  const long long trained = (long long)engine.config().trained_context();
  if (engine.ctx() <= trained) return false;
  std::fprintf(
      stderr,
      "perfx: warning: context %d exceeds the model's trained context %lld; output past %lld "
      "tokens may degrade%s\n",
      engine.ctx(), trained, trained, note.c_str());
  return true;
}

std::string prompt_text(const std::string& prompt, const std::string& file, bool prompt_given) {
  if (file.empty()) return prompt;
  check(!prompt_given, "give the prompt with -p or with -f, not both");
  check(path_exists(file), "-f: '" + file + "' does not exist");
  check(!is_directory(file), "-f: '" + file + "' is a folder, not a text file");
  std::string text = read_text_file(file);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::vector<int32_t> prompt_ids(const Tokenizer& tok, const std::string& prompt, bool add_special,
                                bool require_tokens) {
  bool double_bos = false;
  std::vector<int32_t> ids = encode_prompt(tok, prompt, add_special, false, &double_bos);
  if (double_bos) std::fprintf(stderr, "perfx: warning: %s\n", double_bos_warning(tok).c_str());
  if (require_tokens && ids.empty()) {
    check(!prompt.empty(), "empty prompt and the model has no BOS token to start from");
    throw Error("the prompt encodes to no tokens");
  }
  return ids;
}

}  // namespace perfx::cli
