// Fuzz target: the Jinja chat-template engine (src/tokenizer/chat_template*: lexer, parser,
// evaluator, filters/tests/methods). Input: the template text, optionally followed by a NUL byte
// and a JSON array of messages (or an object {"messages": [...], ...extra variables}); without
// usable JSON a fixed two-turn conversation is used. The template is parsed, then rendered with and
// without add_generation_prompt.
// Invariants: a bad template or a failing render is reported only with perfx::Error (nothing else
// may escape, no ASan/UBSan report, no hang past libFuzzer's -timeout); parsing keeps the source;
// rendering is deterministic (same inputs, same text).
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "perfx/status.h"
#include "tokenizer/chat_template.h"

using namespace perfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [source, msgs] = fuzz::split_nul(data, size);
  ChatTemplateInputs in;
  // A small work budget (the product's is 2^20 steps, seconds under ASan): inputs that hit it
  // still exercise the budget's error path, without slowing the run to a few inputs a second.
  in.max_work = int64_t{1} << 14;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.messages = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},)"
      R"({"role":"assistant","content":"Hello!"},{"role":"user","content":"2+2?"}])");
  if (!msgs.empty()) {
    auto j = nlohmann::ordered_json::parse(msgs, nullptr, /*allow_exceptions=*/false);
    if (j.is_array()) {
      in.messages = std::move(j);
    } else if (j.is_object()) {
      auto m = j.find("messages");
      if (m != j.end()) in.messages = *m;
      j.erase("messages");
      in.extra = std::move(j);
    }
  }
  std::unique_ptr<ChatTemplate> tpl;
  try {
    tpl = std::make_unique<ChatTemplate>(source);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_ASSERT(tpl->source() == source, "source() differs from the parsed text");
  for (bool gen : {true, false}) {
    in.add_generation_prompt = gen;
    try {
      const std::string a = tpl->render(in);
      const std::string b = tpl->render(in);
      // strftime_now reads the clock: two renders may straddle a second.
      if (source.find("strftime_now") == std::string::npos)
        FUZZ_ASSERT(a == b, "render is not deterministic");
    } catch (const Error&) {
    }
  }
  return 0;
}
