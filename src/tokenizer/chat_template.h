// Chat templates: renders a conversation into the prompt text a model was trained on, by
// interpreting the Jinja template stored in tokenizer_config.json ("chat_template"). Only the
// subset of Jinja that real chat templates use is implemented; anything else is rejected at parse
// time (or, for filters/tests/methods looked up at run time, when first used) with an error naming
// the construct and its line. Rendering follows transformers' environment: trim_blocks and
// lstrip_blocks on, loop controls (break/continue) and {% generation %} available, tojson without
// key sorting or HTML escaping.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace perfx {

/// What a template is rendered with.
struct ChatTemplateInputs {
  /// [{"role": ..., "content": ...}, ...]; any extra fields (tool_calls, reasoning_content, ...)
  /// are visible to the template.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  /// Further top-level variables (tools, enable_thinking, ...); an object or null.
  nlohmann::ordered_json extra;
  /// The render's work budget in steps (one per statement, expression or loop iteration, one per
  /// 256 bytes built, one per 16 list items copied); past it render() throws. The default, 2^20,
  /// is far above what real templates need (tens of steps per message) and well under a second.
  /// The fuzz target lowers it to keep its inputs fast.
  int64_t max_work = int64_t{1} << 20;
};

/// A parsed chat template. Parsing happens once; render() is const and may run on several threads.
class ChatTemplate {
 public:
  /// Parses `source`. Throws perfx::Error "chat template: <what> at line N" for a syntax error or
  /// an unsupported statement (include, extends, call blocks, ...).
  explicit ChatTemplate(std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  /// Renders the template. Throws perfx::Error for an unsupported filter/test/method, a type error,
  /// raise_exception() called by the template (the message then starts "chat template raised:
  /// "), or a runaway template: more than inputs.max_work steps, a string over 16 MiB, a list
  /// over 2^20 items, a value nested over 256 levels or recursion over 1000 levels.
  std::string render(const ChatTemplateInputs& inputs) const;

  /// The template text.
  const std::string& source() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Template texts for common formats: "chatml", "llama2", "llama3", "mistral", "zephyr".
/// Returns an empty string for an unknown name.
std::string builtin_chat_template(std::string_view name);

/// Reads a template for --chat-template FILE: either a tokenizer_config.json-style JSON object (its
/// "chat_template" key: a string, or a list of {name, template} where "default" is taken), or a
/// plain Jinja file; a name accepted by builtin_chat_template() is also accepted. Throws
/// perfx::Error naming the file when it cannot be read or holds no template.
std::string load_chat_template(const std::string& path_or_name);

}  // namespace perfx
