// perfx tokenize: print the token ids of a text.
#include <cstdio>

#include "common.h"
#include "perfx/status.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct TokArgs {
  std::string model, prompt, prompt_file;
  bool no_bos = false, pieces = false, prompt_given = false;
};

void tokenize(const TokArgs& a) {
  check(a.prompt_given || !a.prompt_file.empty(), "give the text with -p/--prompt TEXT or -f/--file FILE");
  const std::string text = prompt_text(a.prompt, a.prompt_file, a.prompt_given);
  auto tok = load_tokenizer_only(a.model.empty() ? default_model_path() : a.model);
  // The ids `perfx run` and the server feed the model for this prompt (the same BOS rule).
  const auto ids = prompt_ids(*tok, text, /*add_special=*/!a.no_bos, /*require_tokens=*/false);
  if (a.pieces) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, tok->id_to_token(id).c_str());
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
}

Register reg("tokenize", 20, [](CLI::App& app) {
  auto a = std::make_shared<TokArgs>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids of a text");
  add_model_option(sub, &a->model, "HF checkpoint folder or .gguf file (default: models/default)");
  sub->add_option("-p,--prompt", a->prompt, "Text to tokenize")
      ->each([a](const std::string&) { a->prompt_given = true; });
  sub->add_option("-f,--file", a->prompt_file, "Read the text from a file (one trailing newline dropped)");
  sub->add_flag("--no-bos", a->no_bos, "Do not add BOS");
  sub->add_flag("--pieces", a->pieces, "Print one 'id<TAB>piece' line per token");
  sub->callback([a] { tokenize(*a); });
});

}  // namespace
}  // namespace perfx::cli
