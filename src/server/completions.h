// The completion endpoints' logic, independent of the HTTP library: validate a request, build its
// prompt (chat template + tokenizer), submit it to the scheduler, and turn the scheduler's events
// into an OpenAI response object or a stream of server-sent events. Also /tokenize, /detokenize.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "perfx/engine.h"
#include "server/openai.h"
#include "server/scheduler.h"
#include "tokenizer/chat_template.h"

namespace perfx::server {

class CompletionService {
 public:
  /// `tpl` renders chat requests; when null, chat requests fail with `template_error` (or a
  /// generic message).
  CompletionService(Engine& engine, Scheduler& scheduler, std::unique_ptr<ChatTemplate> tpl,
                    std::string model_id, std::string template_error = "");

  const std::string& model_id() const { return model_id_; }
  int64_t created() const { return created_; }

  /// A request that was validated and submitted.
  struct Call {
    GenerationRequest req;
    std::shared_ptr<RequestHandle> handle;
    std::string id;
    int64_t created = 0;
    int prompt_tokens = 0;
    std::vector<std::string> echo;  // per sequence: text to put before the output (echo)
  };

  /// Parses `body`, builds the prompts and submits them. Throws ApiError (400 bad request,
  /// 404 unknown model, 429 queue full, 500 template failure).
  std::unique_ptr<Call> start(const std::string& body, bool chat);

  /// Waits for the complete result. `alive` is polled while waiting; when it returns false the
  /// request is cancelled and ApiError(499) is thrown. Throws ApiError for a failed request.
  ojson collect(Call& call, const std::function<bool()>& alive);

  /// Streams the result as server-sent events ("data: {...}\n\n" ..., "data: [DONE]\n\n") through
  /// `write`, which returns false once the client is gone; then the request is cancelled. `alive`
  /// is polled between events.
  void stream(Call& call, const std::function<bool(const std::string&)>& write,
              const std::function<bool()>& alive);

  /// POST /tokenize: {"prompt"|"content": text | "messages": [...], "add_special_tokens"|
  /// "add_special": bool, "with_pieces": bool} -> {"tokens", "count", "max_model_len"[, "pieces"]}.
  ojson tokenize(const ojson& body) const;
  /// POST /detokenize: {"tokens": [...]} -> {"prompt": text, "content": text}.
  ojson detokenize(const ojson& body) const;

  /// The prompt text of a chat request (chat template applied).
  std::string render_chat(const GenerationRequest& req) const;

 private:
  // encode_prompt (the one BOS rule); a double BOS is logged as a warning.
  std::vector<int32_t> encode_text(const std::string& text, bool from_template,
                                   bool add_special = true) const;
  // How an alternative shows in logprobs: the text it would have added; "bytes:\xNN" for part of
  // a character; a special token's name.
  LogprobToken alternative(const TokenAlt& a) const;
  // text_offset: the first token's offset (characters) in the choice's text; advanced past them.
  ojson logprobs_json(bool chat, const std::vector<TokenOut>& toks, size_t& text_offset) const;

  Engine& engine_;
  Scheduler& scheduler_;
  std::unique_ptr<ChatTemplate> tpl_;
  std::string model_id_;
  std::string template_error_;
  int64_t created_;
};

}  // namespace perfx::server
