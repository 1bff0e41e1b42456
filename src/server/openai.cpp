// OpenAI request validation and response objects (see openai.h).
#include "server/openai.h"

#include <chrono>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

namespace perfx::server {
namespace {

std::string type_word(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return "null";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return "an integer";
    case ojson::value_t::number_float:
      return "a number";
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::array:
      return "an array";
    case ojson::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

[[noreturn]] void bad_type(const std::string& param, const std::string& expected, const ojson& v) {
  throw ApiError(400,
                 "Invalid type for '" + param + "': expected " + expected + ", but got " +
                     type_word(v) + " instead.",
                 "invalid_request_error", param, "invalid_type");
}

[[noreturn]] void bad_value(const std::string& param, const std::string& message) {
  throw ApiError(400, "Invalid value for '" + param + "': " + message, "invalid_request_error",
                 param, "invalid_value");
}

// A field that is present and not null.
const ojson* field(const ojson& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const ojson& body, const char* name, bool def) {
  const ojson* v = field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) bad_type(name, "a boolean", *v);
  return v->get<bool>();
}

// Integers may arrive as 5 or 5.0 (JavaScript clients); 5.5 is refused.
int64_t as_integer(const std::string& param, const ojson& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)INT64_MAX)
      bad_value(param, "the number is too large.");
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9.0e18) return (int64_t)d;
  }
  bad_type(param, "an integer", v);
}

bool get_int(const ojson& body, const char* name, int64_t lo, int64_t hi, int64_t& out) {
  const ojson* v = field(body, name);
  if (!v) return false;
  int64_t x = as_integer(name, *v);
  if (x < lo || x > hi)
    bad_value(name, std::to_string(x) + " is out of range; it must be between " +
                        std::to_string(lo) + " and " + std::to_string(hi) + ".");
  out = x;
  return true;
}

bool get_number(const ojson& body, const char* name, double lo, double hi, double& out) {
  const ojson* v = field(body, name);
  if (!v) return false;
  if (!v->is_number()) bad_type(name, "a number", *v);
  double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%g is out of range; it must be between %g and %g.", x, lo, hi);
    bad_value(name, buf);
  }
  out = x;
  return true;
}

// Fields shared by both endpoints.
void parse_common(const ojson& body, GenerationRequest& r) {
  if (const ojson* m = field(body, "model")) {
    if (!m->is_string()) bad_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  // OpenAI's defaults: temperature 1, top_p 1, no top-k / min-p, no penalties.
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.min_p = 0.0f;
  r.sampling.repeat_penalty = 1.0f;
  r.sampling.repeat_last_n = -1;  // penalties see everything generated so far
  double d;
  int64_t i;
  const char* max_name =
      field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (get_int(body, max_name, 1, INT32_MAX, i)) r.max_tokens = (int)i;
  // The API's own limits here (OpenAI's 0..2 temperature, -2..2 penalties; top_k -1 = off);
  // SamplingParams::validate() then checks what every front end shares (top_p > 0, ...).
  if (get_number(body, "temperature", 0, 2, d)) r.sampling.temperature = (float)d;
  if (get_number(body, "top_p", 0, 1, d)) r.sampling.top_p = (float)d;
  if (get_int(body, "top_k", -1, INT32_MAX, i)) r.sampling.top_k = (int)std::max<int64_t>(i, 0);
  if (get_number(body, "min_p", 0, 1, d)) r.sampling.min_p = (float)d;
  if (get_number(body, "presence_penalty", -2, 2, d)) r.sampling.presence_penalty = (float)d;
  if (get_number(body, "frequency_penalty", -2, 2, d)) r.sampling.frequency_penalty = (float)d;
  if (get_number(body, "repetition_penalty", 0, 100, d)) r.sampling.repeat_penalty = (float)d;
  try {
    r.sampling.validate();
  } catch (const InvalidSamplingParam& e) {
    // The API's names are the fields' except repetition_penalty.
    const std::string param = e.field() == "repeat_penalty" ? "repetition_penalty" : e.field();
    bad_value(param, param + " " + e.reason() + ".");
  }
  if (const ojson* s = field(body, "seed")) {
    if (s->is_number_unsigned()) {
      r.sampling.seed = s->get<uint64_t>();
    } else {
      r.sampling.seed = (uint64_t)as_integer("seed", *s);
    }
    r.has_seed = true;
  }
  if (const ojson* s = field(body, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > 16) bad_value("stop", "at most 16 stop sequences are allowed.");
      for (const auto& e : *s) {
        if (!e.is_string()) bad_type("stop", "a string or an array of strings", *s);
        r.stop.push_back(e.get<std::string>());
      }
    } else {
      bad_type("stop", "a string or an array of strings", *s);
    }
    for (const auto& st : r.stop) {
      if (st.empty()) bad_value("stop", "stop sequences must not be empty.");
      if (st.size() > kMaxStopBytes)
        bad_value("stop", "a stop sequence is " + std::to_string(st.size()) +
                              " bytes; the limit is " + std::to_string(kMaxStopBytes) + " bytes.");
    }
  }
  if (get_int(body, "n", 1, 16, i)) r.n = (int)i;
  r.stream = get_bool(body, "stream", false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_type("stream_options", "an object", *so);
    if (!r.stream)
      bad_value("stream_options", "stream_options is only allowed when 'stream' is true.");
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  r.ignore_eos = get_bool(body, "ignore_eos", false);
  r.cache_prompt = get_bool(body, "cache_prompt", true);
  if (const ojson* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) bad_type("logit_bias", "an object", *lb);
    if (!lb->empty()) bad_value("logit_bias", "logit_bias is not supported by this server.");
  }
  if (const ojson* rf = field(body, "response_format")) {
    if (!rf->is_object()) bad_type("response_format", "an object", *rf);
    std::string t = rf->value("type", "text");
    if (t != "text") bad_value("response_format", "only {\"type\": \"text\"} is supported.");
  }
}

// Chat message content: a string, null, or a list of parts [{"type": "text", "text": ...}].
std::string message_content(const ojson& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_type(param, "a string or an array of content parts", content);
  std::string out;
  for (const auto& part : content) {
    if (!part.is_object()) bad_type(param, "an array of content parts", content);
    std::string type = part.value("type", "");
    if (type != "text")
      bad_value(param, "content parts of type '" + type + "' are not supported (only 'text').");
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) bad_type(param + ".text", "a string", part);
    out += t->get<std::string>();
  }
  return out;
}

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t k = 0; k < n; ++k) out += digits[rng() & 15];
  return out;
}

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string type, std::string param,
                   std::string code)
    : std::runtime_error(message),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

std::string ApiError::body() const {
  ojson e = {
      {"message", valid_utf8(what())}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
  if (!param_.empty()) e["param"] = param_;
  if (!code_.empty()) e["code"] = code_;
  return ojson{{"error", e}}.dump();
}

ApiError error_for_status(int status, const std::string& path) {
  switch (status) {
    case 400:
      return ApiError(400, "Bad request.");
    case 401:
      return ApiError(401, "Missing or invalid API key.", "invalid_request_error", "",
                      "invalid_api_key");
    case 404:
      return ApiError(404, "Unknown route: " + path, "invalid_request_error", "", "not_found");
    case 405:
      return ApiError(405, "Method not allowed for " + path, "invalid_request_error");
    case 413:
      return ApiError(413, "Request body too large.", "invalid_request_error", "",
                      "payload_too_large");
    case 414:
      return ApiError(414, "Request URI too long.", "invalid_request_error");
    case 429:
      return ApiError(429, "The server is busy; retry later.", "server_busy", "", "queue_full");
    case 503:
      return ApiError(503, "Service unavailable.", "server_error");
    default:
      return ApiError(status, status >= 500 ? "Internal server error." : "Request failed.",
                      status >= 500 ? "server_error" : "invalid_request_error");
  }
}

ojson parse_json_body(const std::string& body) {
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    // nlohmann's messages start with "[json.exception.parse_error.101] "; keep the readable part.
    size_t p = what.find("] ");
    throw ApiError(400,
                   "The request body is not valid JSON: " +
                       (p == std::string::npos ? what : what.substr(p + 2)),
                   "invalid_request_error", "", "invalid_json");
  }
  if (!j.is_object())
    throw ApiError(400, "The request body must be a JSON object, not " + type_word(j) + ".",
                   "invalid_request_error", "", "invalid_json");
  // nlohmann parses and destroys without recursion, but copying, dumping and the chat template's
  // Value::from_json recurse, so the depth is bounded here, walking with an explicit stack.
  std::vector<std::pair<const ojson*, int>> todo{{&j, 1}};
  while (!todo.empty()) {
    auto [v, depth] = todo.back();
    todo.pop_back();
    if (depth > kMaxJsonDepth)
      throw ApiError(400,
                     "The request body nests arrays and objects more than " +
                         std::to_string(kMaxJsonDepth) + " levels deep.",
                     "invalid_request_error", "", "invalid_json");
    if (v->is_structured())
      for (const auto& c : *v) todo.emplace_back(&c, depth + 1);
  }
  return j;
}

GenerationRequest parse_chat_request(const ojson& body) {
  GenerationRequest r;
  r.chat = true;
  parse_common(body, r);
  const ojson* msgs = field(body, "messages");
  if (!msgs)
    throw ApiError(400, "Missing required parameter: 'messages'.", "invalid_request_error",
                   "messages", "missing_required_parameter");
  if (!msgs->is_array()) bad_type("messages", "an array", *msgs);
  if (msgs->empty()) bad_value("messages", "at least one message is required.");
  r.messages = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_type(p, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw ApiError(400, "Missing or invalid '" + p + ".role'.", "invalid_request_error",
                     p + ".role");
    std::string rs = role->get<std::string>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer")
      bad_value(p + ".role",
                "'" + rs + "' is not one of system, developer, user, assistant, tool.");
    ojson out = m;
    if (rs == "developer") out["role"] = "system";
    auto content = m.find("content");
    if (content == m.end() && rs != "assistant")
      throw ApiError(400, "Missing required parameter: '" + p + ".content'.",
                     "invalid_request_error", p + ".content", "missing_required_parameter");
    out["content"] = content == m.end() ? std::string() : message_content(*content, i);
    r.messages.push_back(std::move(out));
  }
  // vLLM takes a template text here; this server renders only the template it was started with
  // (--chat-template), so a request can never make it read a file.
  if (field(body, "chat_template"))
    bad_value("chat_template",
              "per-request chat templates are not supported; the server's template is set with "
              "perfx serve --chat-template.");
  r.template_kwargs = ojson::object();
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) bad_type("tools", "an array", *tools);
    r.template_kwargs["tools"] = *tools;
  }
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad_type("chat_template_kwargs", "an object", *kw);
    for (auto it = kw->begin(); it != kw->end(); ++it) r.template_kwargs[it.key()] = it.value();
  }
  r.add_generation_prompt = get_bool(body, "add_generation_prompt", true);
  bool want_logprobs = get_bool(body, "logprobs", false);
  int64_t top = 0;
  bool has_top = get_int(body, "top_logprobs", 0, 20, top);
  if (has_top && !want_logprobs)
    bad_value("top_logprobs", "'logprobs' must be true when 'top_logprobs' is set.");
  if (want_logprobs) r.logprobs = (int)top;
  return r;
}

GenerationRequest parse_completion_request(const ojson& body) {
  GenerationRequest r;
  r.chat = false;
  parse_common(body, r);
  const ojson* p = field(body, "prompt");
  if (!p)
    throw ApiError(400, "Missing required parameter: 'prompt'.", "invalid_request_error", "prompt",
                   "missing_required_parameter");
  const std::string expected =
      "a string, an array of strings, an array of token ids or an array of arrays of token ids";
  auto token_list = [&](const ojson& arr) {
    Prompt pr;
    pr.is_tokens = true;
    for (const auto& t : arr) {
      if (!t.is_number_integer() && !t.is_number_unsigned()) bad_type("prompt", expected, *p);
      int64_t id = t.get<int64_t>();
      if (id < 0 || id > INT32_MAX)
        bad_value("prompt", "token id " + std::to_string(id) + " is invalid.");
      pr.ids.push_back((int32_t)id);
    }
    if (pr.ids.empty()) bad_value("prompt", "a token-id prompt must not be empty.");
    return pr;
  };
  if (p->is_string()) {
    r.prompts.push_back(Prompt{false, p->get<std::string>(), {}});
  } else if (p->is_array()) {
    if (p->empty()) bad_value("prompt", "the prompt list must not be empty.");
    const ojson& first = (*p)[0];
    if (first.is_number()) {
      r.prompts.push_back(token_list(*p));
    } else {
      for (const auto& e : *p) {
        if (e.is_string()) {
          r.prompts.push_back(Prompt{false, e.get<std::string>(), {}});
        } else if (e.is_array()) {
          r.prompts.push_back(token_list(e));
        } else {
          bad_type("prompt", expected, *p);
        }
      }
    }
    if (r.prompts.size() > 64) bad_value("prompt", "at most 64 prompts per request.");
  } else {
    bad_type("prompt", expected, *p);
  }
  int64_t lp;
  if (get_int(body, "logprobs", 0, 20, lp)) r.logprobs = (int)lp;
  r.echo = get_bool(body, "echo", false);
  if (r.echo && r.logprobs >= 0)
    bad_value("echo", "'echo' together with 'logprobs' is not supported by this server.");
  if (const ojson* s = field(body, "suffix")) {
    if (!s->is_string()) bad_type("suffix", "a string", *s);
    if (!s->get<std::string>().empty())
      bad_value("suffix", "'suffix' is not supported by this server.");
  }
  int64_t best_of;
  if (get_int(body, "best_of", 1, 16, best_of) && best_of != r.n)
    bad_value("best_of", "only best_of equal to n is supported.");
  return r;
}

TokenizeRequest parse_tokenize_request(const ojson& body) {
  TokenizeRequest t;
  if (body.contains("messages")) {
    t.chat = true;
    t.chat_req = parse_chat_request(body);
  } else {
    const char* key = body.contains("prompt") ? "prompt" : "content";
    auto it = body.find(key);
    if (it == body.end() || !it->is_string())
      throw ApiError(400, "Expected a string 'prompt' (or 'content'), or 'messages'.",
                     "invalid_request_error", key);
    t.text = it->get<std::string>();
    t.add_special = std::string(key) == "prompt";  // vLLM's default; llama.cpp's is false
    for (const char* k : {"add_special_tokens", "add_special"}) {
      auto a = body.find(k);
      if (a != body.end() && !a->is_null()) {
        if (!a->is_boolean())
          throw ApiError(400, std::string("'") + k + "' must be a boolean.",
                         "invalid_request_error", k);
        t.add_special = a->get<bool>();
      }
    }
  }
  auto wp = body.find("with_pieces");
  t.with_pieces = wp != body.end() && wp->is_boolean() && wp->get<bool>();
  return t;
}

std::vector<int32_t> parse_detokenize_request(const ojson& body, int vocab_size) {
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    throw ApiError(400, "Expected 'tokens': an array of token ids.", "invalid_request_error",
                   "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : *it) {
    if (!t.is_number_integer() && !t.is_number_unsigned())
      throw ApiError(400, "'tokens' must hold integers.", "invalid_request_error", "tokens");
    int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab_size)
      throw ApiError(400, "Token id " + std::to_string(id) + " is outside the vocabulary.",
                     "invalid_request_error", "tokens");
    ids.push_back((int32_t)id);
  }
  return ids;
}

std::string new_completion_id(bool chat) {
  return std::string(chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
}

ojson Usage::to_json() const {
  return ojson{{"prompt_tokens", prompt_tokens},
               {"completion_tokens", completion_tokens},
               {"total_tokens", prompt_tokens + completion_tokens}};
}

ojson completion_response(bool chat, const std::string& id, int64_t created,
                          const std::string& model, const std::vector<ChoiceResult>& choices,
                          const Usage& usage) {
  ojson out;
  out["id"] = id;
  out["object"] = chat ? "chat.completion" : "text_completion";
  out["created"] = created;
  out["model"] = model;
  out["system_fingerprint"] = "perfx-0.1.0";
  ojson arr = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& c = choices[i];
    ojson ch;
    ch["index"] = (int)i;
    if (chat) {
      ch["message"] = ojson{{"role", "assistant"}, {"content", valid_utf8(c.text)}};
    } else {
      ch["text"] = valid_utf8(c.text);
    }
    ch["logprobs"] = c.logprobs;
    ch["finish_reason"] = c.finish_reason;
    arr.push_back(std::move(ch));
  }
  out["choices"] = std::move(arr);
  out["usage"] = usage.to_json();
  return out;
}

ojson stream_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                   int index, const std::string& text, bool role_delta,
                   const std::string& finish_reason, const ojson& logprobs, bool usage_null) {
  ojson out;
  out["id"] = id;
  out["object"] = chat ? "chat.completion.chunk" : "text_completion";
  out["created"] = created;
  out["model"] = model;
  out["system_fingerprint"] = "perfx-0.1.0";
  ojson ch;
  ch["index"] = index;
  if (chat) {
    ojson delta = ojson::object();
    if (role_delta) delta["role"] = "assistant";
    if (!text.empty() || (role_delta && finish_reason.empty())) delta["content"] = valid_utf8(text);
    ch["delta"] = std::move(delta);
  } else {
    ch["text"] = valid_utf8(text);
  }
  ch["logprobs"] = logprobs;
  ch["finish_reason"] = finish_reason.empty() ? ojson(nullptr) : ojson(finish_reason);
  out["choices"] = ojson::array({std::move(ch)});
  if (usage_null) out["usage"] = nullptr;
  return out;
}

ojson usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                  const Usage& usage) {
  ojson out;
  out["id"] = id;
  out["object"] = chat ? "chat.completion.chunk" : "text_completion";
  out["created"] = created;
  out["model"] = model;
  out["system_fingerprint"] = "perfx-0.1.0";
  out["choices"] = ojson::array();
  out["usage"] = usage.to_json();
  return out;
}

ojson chat_logprob_entry(const LogprobToken& t, const std::vector<LogprobToken>& top) {
  auto bytes = [](const std::string& s) {
    ojson b = ojson::array();
    for (unsigned char c : s) b.push_back((int)c);
    return b;
  };
  ojson e;
  e["token"] = valid_utf8(t.token);
  e["logprob"] = t.logprob;
  e["bytes"] = bytes(t.bytes);
  ojson tops = ojson::array();
  for (const auto& a : top)
    tops.push_back(
        ojson{{"token", valid_utf8(a.token)}, {"logprob", a.logprob}, {"bytes", bytes(a.bytes)}});
  e["top_logprobs"] = std::move(tops);
  return e;
}

std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = (unsigned char)s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) ok = ((unsigned char)s[i + k] >> 6) == 2;
    if (ok && n > 1) {  // reject overlong forms, surrogates and code points past U+10FFFF
      uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
      for (int k = 1; k < n; ++k) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
      ok = !((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
             (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF);
    }
    if (ok) {
      out.append(s, i, (size_t)n);
      i += (size_t)n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace perfx::server
