// perfx tokenize: print the token ids of a text.
#include <cstdio>

#include "common.h"
#include "subcommand.h"

namespace perfx::cli {
namespace {

struct TokArgs {
  std::string model, prompt;
  bool no_bos = false, pieces = false;
};

void tokenize(const TokArgs& a) {
  auto tok = load_tokenizer_only(a.model.empty() ? default_model_path() : a.model);
  // The ids `perfx run` and the server feed the model for this prompt (the same BOS rule).
  const auto ids = prompt_ids(*tok, a.prompt, /*add_special=*/!a.no_bos, /*require_tokens=*/false);
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
  sub->add_option("-m,--model", a->model, "HF checkpoint folder or .gguf file (default: models/default)");
  sub->add_option("-p,--prompt", a->prompt, "Text to tokenize")->required();
  sub->add_flag("--no-bos", a->no_bos, "Do not add BOS");
  sub->add_flag("--pieces", a->pieces, "Print one 'id<TAB>piece' line per token");
  sub->callback([a] { tokenize(*a); });
});

}  // namespace
}  // namespace perfx::cli
