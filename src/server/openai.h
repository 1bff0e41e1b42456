// OpenAI API schemas: parsing and validation of /v1/chat/completions and /v1/completions bodies,
// the response and stream-chunk objects, and errors in OpenAI's shape
// {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "perfx/sampling.h"

namespace perfx::server {

using ojson = nlohmann::ordered_json;

/// An error answered to the client with `status` and OpenAI's error object.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "");
  int status() const { return status_; }
  /// {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
  std::string body() const;

 private:
  int status_;
  std::string type_, param_, code_;
};

/// The error object for an HTTP status when no handler produced one (404 route, 413 body, ...).
ApiError error_for_status(int status, const std::string& path);

/// One prompt of a completion request: text, or token ids.
struct Prompt {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> ids;
};

/// API limits of a request (400 beyond them, naming the field): at most 16 stop sequences of at
/// most kMaxStopBytes bytes each; n at most 16; max_tokens within the context.
constexpr size_t kMaxStopBytes = 1024;

/// A validated generation request (chat or completion).
struct GenerationRequest {
  bool chat = false;
  std::string model;                  // as sent; empty when omitted
  ojson messages;                     // chat: [{role, content: string, ...}] (content parts joined)
  ojson template_kwargs;              // chat: tools, chat_template_kwargs (an object or null)
  bool add_generation_prompt = true;  // chat
  std::vector<Prompt> prompts;        // completions (one or more)
  int max_tokens = -1;                // -1: until the context is full
  SamplingParams sampling;
  bool has_seed = false;
  std::vector<std::string> stop;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  int logprobs = -1;        // -1: none; else how many alternatives (0..20)
  bool echo = false;        // completions: prepend the prompt to the text
  bool ignore_eos = false;  // extension (vLLM, llama.cpp)
  bool cache_prompt = true;  // extension (llama.cpp): false: no prefix-cache reuse for it
};

/// Deepest nesting of arrays/objects a request body may have (the body object is level 1).
inline constexpr int kMaxJsonDepth = 128;
/// Parses a JSON body; ApiError 400 for invalid JSON, a non-object, or nesting deeper than
/// kMaxJsonDepth (code invalid_json).
ojson parse_json_body(const std::string& body);
/// Validates a /v1/chat/completions body. ApiError 400 naming the parameter at fault.
GenerationRequest parse_chat_request(const ojson& body);
/// Validates a /v1/completions body. ApiError 400 naming the parameter at fault.
GenerationRequest parse_completion_request(const ojson& body);

/// A validated POST /tokenize body: {"prompt"|"content": text | "messages": [...],
/// "add_special_tokens"|"add_special": bool, "with_pieces": bool}.
struct TokenizeRequest {
  bool chat = false;           // "messages" given: chat_req is the chat request to render
  GenerationRequest chat_req;  // chat
  std::string text;            // else the prompt text
  bool add_special = true;     // text: "prompt" defaults to true (vLLM), "content" to false
  bool with_pieces = false;
};
/// Validates a /tokenize body. ApiError 400 naming the parameter at fault.
TokenizeRequest parse_tokenize_request(const ojson& body);
/// Validates a /detokenize body {"tokens": [ids]}: every id an integer in [0, vocab_size).
/// ApiError 400 naming "tokens" otherwise.
std::vector<int32_t> parse_detokenize_request(const ojson& body, int vocab_size);

/// "chatcmpl-<24 hex>" / "cmpl-<24 hex>".
std::string new_completion_id(bool chat);

/// One choice's result for a non-streamed response.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;
  ojson logprobs;  // null, or the chat / completions logprobs object
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  ojson to_json() const;
};

/// The full chat.completion / text_completion object.
ojson completion_response(bool chat, const std::string& id, int64_t created,
                          const std::string& model, const std::vector<ChoiceResult>& choices,
                          const Usage& usage);

/// One chunk of a streamed response with a single choice. For chat, `role_delta` adds
/// "role": "assistant" to the delta; finish_reason empty means null. `usage_null` adds
/// "usage": null (when stream_options.include_usage is on).
ojson stream_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                   int index, const std::string& text, bool role_delta,
                   const std::string& finish_reason, const ojson& logprobs, bool usage_null);
/// The final usage chunk of a stream (choices: []).
ojson usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                  const Usage& usage);

/// A token as logprobs show it: its string, its raw bytes, its log-probability.
struct LogprobToken {
  std::string token;  // shown as is (made valid UTF-8)
  std::string bytes;  // shown as a list of byte values
  float logprob = 0;
};
/// One token's entry in chat logprobs: {"token", "logprob", "bytes", "top_logprobs": [{"token",
/// "logprob", "bytes"}]}.
ojson chat_logprob_entry(const LogprobToken& t, const std::vector<LogprobToken>& top);
/// Text that is valid UTF-8 (invalid bytes become U+FFFD), for JSON output.
std::string valid_utf8(const std::string& s);

}  // namespace perfx::server
