// Chat templates: the public API over the Jinja-subset interpreter (lexer, parser, evaluator in
// chat_template_*.cpp), the built-in templates for common formats, and --chat-template loading.
#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "perfx/status.h"
#include "tokenizer/chat_template_internal.h"

namespace perfx {

struct ChatTemplate::Impl {
  std::string source;
  jinja::Body tree;
};

ChatTemplate::ChatTemplate(std::string source) : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
  impl_->tree = jinja::parse(jinja::lex(impl_->source));
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::source() const {
  return impl_->source;
}

std::string ChatTemplate::render(const ChatTemplateInputs& in) const {
  jinja::Dict globals;
  jinja::add_global_functions(globals);
  if (in.extra.is_object()) {
    for (auto it = in.extra.begin(); it != in.extra.end(); ++it)
      globals.set(it.key(), jinja::Value::from_json(it.value()));
  }
  globals.set("messages",
              jinja::Value::from_json(in.messages.is_array() ? in.messages
                                                             : nlohmann::ordered_json::array()));
  globals.set("add_generation_prompt", jinja::Value::boolean(in.add_generation_prompt));
  globals.set("bos_token", jinja::Value::string(in.bos_token));
  globals.set("eos_token", jinja::Value::string(in.eos_token));
  return jinja::render(impl_->tree, globals, in.max_work);
}

namespace {

// The templates below are written for PerfXLLM from the published prompt formats.
constexpr const char* kChatML = R"JINJA(
{%- for message in messages -%}
  {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)JINJA";

constexpr const char* kLlama3 = R"JINJA(
{{- bos_token -}}
{%- for message in messages -%}
  {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' -}}
  {{- message['content'] | trim -}}
  {{- '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)JINJA";

constexpr const char* kLlama2 = R"JINJA(
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system = messages[0]['content'] -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = none -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {%- set text = message['content'] | trim -%}
    {%- if loop.first and system is not none -%}
      {%- set text = '<<SYS>>\n' + system | trim + '\n<</SYS>>\n\n' + text -%}
    {%- endif -%}
    {{- bos_token + '[INST] ' + text + ' [/INST]' -}}
  {%- else -%}
    {{- ' ' + message['content'] | trim + ' ' + eos_token -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

constexpr const char* kMistral = R"JINJA(
{{- bos_token -}}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system = messages[0]['content'] -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = none -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {%- set text = message['content'] -%}
    {%- if loop.first and system is not none -%}
      {%- set text = system + '\n\n' + text -%}
    {%- endif -%}
    {{- '[INST] ' + text + ' [/INST]' -}}
  {%- else -%}
    {{- message['content'] + eos_token -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

constexpr const char* kZephyr = R"JINJA(
{%- for message in messages -%}
  {{- '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|assistant|>\n' -}}
{%- endif -%}
)JINJA";

std::string trim_outer_newlines(const char* s) {
  std::string t(s);
  while (!t.empty() && t.front() == '\n') t.erase(0, 1);
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t;
}

}  // namespace

std::string builtin_chat_template(std::string_view name) {
  if (name == "chatml") return trim_outer_newlines(kChatML);
  if (name == "llama3") return trim_outer_newlines(kLlama3);
  if (name == "llama2") return trim_outer_newlines(kLlama2);
  if (name == "mistral") return trim_outer_newlines(kMistral);
  if (name == "zephyr") return trim_outer_newlines(kZephyr);
  return "";
}

std::string load_chat_template(const std::string& path_or_name) {
  std::string builtin = builtin_chat_template(path_or_name);
  if (!builtin.empty()) return builtin;
  std::ifstream f(path_or_name, std::ios::binary);
  if (!f)
    throw Error("--chat-template: cannot read '" + path_or_name +
                "' (not a file, and not one of chatml, llama2, llama3, mistral, zephyr)");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    nlohmann::ordered_json j;
    bool is_json = true;
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception&) {
      is_json = false;  // a Jinja file that starts with {{ or {%
    }
    if (is_json) {
      if (!j.is_object() || !j.contains("chat_template"))
        throw Error("--chat-template: '" + path_or_name +
                    "' is JSON without a \"chat_template\" key");
      const auto& ct = j["chat_template"];
      if (ct.is_string()) return ct.get<std::string>();
      if (ct.is_array()) {
        for (const auto& e : ct) {
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
              e["template"].is_string())
            return e["template"].get<std::string>();
        }
      }
      throw Error("--chat-template: '" + path_or_name +
                  "': \"chat_template\" is neither a string nor a list with a \"default\" entry");
    }
  }
  if (text.empty()) throw Error("--chat-template: '" + path_or_name + "' is empty");
  return text;
}

}  // namespace perfx
