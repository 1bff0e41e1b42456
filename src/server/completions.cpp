// Completion endpoints' logic (see completions.h).
#include "server/completions.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "perfx/model_config.h"
#include "perfx/status.h"

namespace perfx::server {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(25);

// Characters (code points) of valid UTF-8: text_offset counts them, as vLLM (Python's len) does.
size_t char_count(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CompletionService::CompletionService(Engine& engine, Scheduler& scheduler,
                                     std::unique_ptr<ChatTemplate> tpl, std::string model_id,
                                     std::string template_error)
    : engine_(engine),
      scheduler_(scheduler),
      tpl_(std::move(tpl)),
      model_id_(std::move(model_id)),
      template_error_(std::move(template_error)),
      created_(unix_now()) {}

std::vector<int32_t> CompletionService::encode_text(const std::string& text, bool from_template,
                                                    bool add_special) const {
  const Tokenizer& tok = engine_.tokenizer();
  bool double_bos = false;
  std::vector<int32_t> ids = encode_prompt(tok, text, add_special, from_template, &double_bos);
  if (double_bos)
    std::fprintf(stderr, "perfx serve: warning: %s\n", double_bos_warning(tok).c_str());
  return ids;
}

std::string CompletionService::render_chat(const GenerationRequest& req) const {
  if (!tpl_)
    throw ApiError(
        500, template_error_.empty() ? "This model has no usable chat template." : template_error_,
        "server_error");
  ChatTemplateInputs in;
  in.messages = req.messages;
  in.add_generation_prompt = req.add_generation_prompt;
  in.bos_token = engine_.tokenizer().bos_token();
  in.eos_token = engine_.tokenizer().eos_token();
  in.extra = req.template_kwargs;
  try {
    return tpl_->render(in);
  } catch (const Error& e) {
    const std::string what = e.what();
    // raise_exception() in a template reports a problem with the conversation (client's fault).
    if (what.rfind("chat template raised: ", 0) == 0)
      throw ApiError(400, what, "invalid_request_error", "messages");
    throw ApiError(500, what, "server_error");
  }
}

std::unique_ptr<CompletionService::Call> CompletionService::start(const std::string& body,
                                                                  bool chat) {
  ojson j = parse_json_body(body);
  auto call = std::make_unique<Call>();
  call->req = chat ? parse_chat_request(j) : parse_completion_request(j);
  GenerationRequest& req = call->req;
  if (!req.model.empty() && req.model != model_id_)
    throw ApiError(
        404,
        "The model '" + req.model + "' does not exist (this server serves '" + model_id_ + "').",
        "invalid_request_error", "model", "model_not_found");
  const Tokenizer& tok = engine_.tokenizer();
  const int vocab = (int)engine_.config().vocab_size;
  const int ctx = engine_.ctx();
  const char* prompt_param = chat ? "messages" : "prompt";

  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_text;
  if (chat) {
    prompts.push_back(encode_text(render_chat(req), /*from_template=*/true));
    echo_text.emplace_back();
  } else {
    for (const auto& p : req.prompts) {
      if (p.is_tokens) {
        for (int32_t id : p.ids)
          if (id >= vocab)
            throw ApiError(400,
                           "Token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                               std::to_string(vocab - 1) + ").",
                           "invalid_request_error", "prompt", "invalid_value");
        prompts.push_back(p.ids);
        // Decoded as the output is (special tokens skipped), so echo + output == decode(all ids).
        echo_text.push_back(req.echo ? tok.decode(p.ids, /*skip_special=*/true) : "");
      } else {
        prompts.push_back(encode_text(p.text, /*from_template=*/false));
        echo_text.push_back(req.echo ? p.text : "");
      }
    }
  }
  std::random_device rd;
  std::vector<SequenceSpec> specs;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int len = (int)prompts[p].size();
    if (len == 0)
      throw ApiError(400, "The prompt is empty (and this model adds no BOS token).",
                     "invalid_request_error", prompt_param, "invalid_value");
    const int max = req.max_tokens > 0 ? req.max_tokens : ctx - len;
    if (len >= ctx || (int64_t)len + max > ctx)  // int64: max_tokens may be near INT32_MAX
      throw ApiError(400,
                     "This model's maximum context length is " + std::to_string(ctx) +
                         " tokens. However, you requested " +
                         std::to_string((int64_t)len + std::max(max, 0)) + " tokens (" +
                         std::to_string(len) + " in the " + prompt_param + ", " +
                         std::to_string(std::max(max, 0)) +
                         " in the completion). Please reduce the length of the " + prompt_param +
                         " or completion.",
                     "invalid_request_error", prompt_param, "context_length_exceeded");
    call->prompt_tokens += len;
    for (int i = 0; i < req.n; ++i) {
      SequenceSpec s;
      s.prompt = prompts[p];
      s.max_tokens = max;
      s.sampling = req.sampling;
      s.sampling.seed = req.has_seed ? req.sampling.seed + p * (uint64_t)req.n + (uint64_t)i
                                     : ((uint64_t)rd() << 32) ^ rd();
      s.stop = req.stop;
      s.ignore_eos = req.ignore_eos;
      s.cache_prompt = req.cache_prompt;
      s.logprobs = req.logprobs;
      specs.push_back(std::move(s));
      call->echo.push_back(echo_text[p]);
    }
  }
  try {
    call->handle = scheduler_.submit(std::move(specs));
  } catch (const QueueFull& e) {
    throw ApiError(429, e.what(), "server_busy", "", "queue_full");
  } catch (const ShuttingDown& e) {
    throw ApiError(503, e.what(), "server_error", "", "shutting_down");
  } catch (const TooManySequences& e) {
    throw ApiError(400, e.what(), "invalid_request_error", "n", "too_many_sequences");
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", prompt_param);
  }
  call->id = new_completion_id(chat);
  call->created = unix_now();
  return call;
}

LogprobToken CompletionService::alternative(const TokenAlt& a) const {
  const Tokenizer& tok = engine_.tokenizer();
  LogprobToken t{a.bytes, a.bytes, a.logprob};
  if (a.bytes.empty() && tok.is_special(a.id)) {
    t.token = t.bytes = tok.id_to_token(a.id);  // a special token adds no text: show its name
  } else if (valid_utf8(a.bytes) != a.bytes) {
    t.token = "bytes:";  // part of a character, in OpenAI's form: "bytes:\xe6"
    for (unsigned char c : a.bytes) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      t.token += buf;
    }
  }
  return t;
}

ojson CompletionService::logprobs_json(bool chat, const std::vector<TokenOut>& toks,
                                       size_t& text_offset) const {
  if (chat) {
    ojson content = ojson::array();
    for (const auto& t : toks) {
      std::vector<LogprobToken> top;
      for (const auto& a : t.top) top.push_back(alternative(a));
      content.push_back(chat_logprob_entry({t.text, t.bytes, t.logprob}, top));
    }
    return ojson{{"content", std::move(content)}};
  }
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(),
        offsets = ojson::array();
  for (const auto& t : toks) {
    tokens.push_back(valid_utf8(t.text));
    lps.push_back(t.logprob);
    ojson top = ojson::object();
    for (const auto& a : t.top) {
      // One entry per token id: a string two alternatives share (a byte-fallback token and the
      // piece of the same character) names the less likely one by its id.
      std::string key = alternative(a).token;
      if (top.contains(key)) key = "token_id:" + std::to_string(a.id);
      top[key] = a.logprob;
    }
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += char_count(t.text);
  }
  return ojson{{"tokens", std::move(tokens)},
               {"token_logprobs", std::move(lps)},
               {"top_logprobs", std::move(tops)},
               {"text_offset", std::move(offsets)}};
}

ojson CompletionService::collect(Call& c, const std::function<bool()>& alive) {
  const int n = c.handle->size();
  std::vector<ChoiceResult> res((size_t)n);
  std::vector<std::vector<TokenOut>> toks((size_t)n);
  for (int i = 0; i < n; ++i) res[(size_t)i].text = c.echo[(size_t)i];
  Usage usage;
  usage.prompt_tokens = c.prompt_tokens;
  int done = 0;
  while (done < n) {
    std::vector<Event> evs = c.handle->wait(kPoll);
    if (!alive()) {
      c.handle->cancel();
      throw ApiError(499, "The client closed the connection.", "cancelled");
    }
    for (auto& e : evs) {
      ChoiceResult& r = res[(size_t)e.index];
      switch (e.kind) {
        case Event::Kind::Token:
          r.text += e.text;
          if (c.req.logprobs >= 0) toks[(size_t)e.index].push_back(std::move(e.token));
          break;
        case Event::Kind::Finished:
          r.text += e.text;
          r.finish_reason = e.finish_reason;
          usage.completion_tokens += e.completion_tokens;
          ++done;
          break;
        case Event::Kind::Error:
          c.handle->cancel();
          throw ApiError(e.status, e.error,
                         e.status >= 500 ? "server_error" : "invalid_request_error");
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    size_t offset = char_count(c.echo[(size_t)i]);
    if (c.req.logprobs >= 0)
      res[(size_t)i].logprobs = logprobs_json(c.req.chat, toks[(size_t)i], offset);
  }
  return completion_response(c.req.chat, c.id, c.created, model_id_, res, usage);
}

void CompletionService::stream(Call& c, const std::function<bool(const std::string&)>& write,
                               const std::function<bool()>& alive) {
  const bool chat = c.req.chat;
  const bool usage_null = c.req.include_usage;
  const int n = c.handle->size();
  auto send = [&](const ojson& j) { return write("data: " + j.dump() + "\n\n"); };
  auto gone = [&] {
    c.handle->cancel();
    return;
  };
  std::vector<size_t> offset((size_t)n, 0);
  for (int i = 0; i < n; ++i) {
    const std::string& echo = c.echo[(size_t)i];
    if (chat &&
        !send(stream_chunk(chat, c.id, c.created, model_id_, i, "", true, "", nullptr, usage_null)))
      return gone();
    if (!echo.empty()) {
      if (!send(stream_chunk(chat, c.id, c.created, model_id_, i, echo, false, "", nullptr,
                             usage_null)))
        return gone();
      offset[(size_t)i] = char_count(echo);
    }
  }
  Usage usage;
  usage.prompt_tokens = c.prompt_tokens;
  int done = 0;
  while (done < n) {
    std::vector<Event> evs = c.handle->wait(kPoll);
    if (!alive()) return gone();  // checked every wake-up: a step is the longest we wait
    if (evs.empty()) continue;
    for (size_t k = 0; k < evs.size();) {
      Event& e = evs[k];
      if (e.kind == Event::Kind::Token) {
        // Consecutive tokens of one choice go out as one chunk.
        std::string text;
        std::vector<TokenOut> toks;
        size_t m = k;
        while (m < evs.size() && evs[m].kind == Event::Kind::Token && evs[m].index == e.index) {
          text += evs[m].text;
          toks.push_back(std::move(evs[m].token));
          ++m;
        }
        k = m;
        const bool lp = c.req.logprobs >= 0;
        if (text.empty() && !lp) continue;
        ojson lpj = lp ? logprobs_json(chat, toks, offset[(size_t)e.index]) : ojson(nullptr);
        if (!send(stream_chunk(chat, c.id, c.created, model_id_, e.index, text, false, "", lpj,
                               usage_null)))
          return gone();
        continue;
      }
      if (e.kind == Event::Kind::Finished) {
        usage.completion_tokens += e.completion_tokens;
        ++done;
        if (!send(stream_chunk(chat, c.id, c.created, model_id_, e.index, e.text, false,
                               e.finish_reason, nullptr, usage_null)))
          return gone();
      } else {
        c.handle->cancel();
        ApiError err(e.status, e.error, e.status >= 500 ? "server_error" : "invalid_request_error");
        write("data: " + err.body() + "\n\n");
        write("data: [DONE]\n\n");
        return;
      }
      ++k;
    }
  }
  if (c.req.include_usage && !send(usage_chunk(chat, c.id, c.created, model_id_, usage)))
    return gone();
  write("data: [DONE]\n\n");
}

ojson CompletionService::tokenize(const ojson& body) const {
  const Tokenizer& tok = engine_.tokenizer();
  const TokenizeRequest treq = parse_tokenize_request(body);
  std::vector<int32_t> ids;
  if (treq.chat)
    ids = encode_text(render_chat(treq.chat_req), /*from_template=*/true);
  else
    ids = encode_text(treq.text, /*from_template=*/false, treq.add_special);
  ojson out;
  out["tokens"] = ids;
  out["count"] = ids.size();
  out["max_model_len"] = engine_.ctx();
  if (treq.with_pieces) {
    // Each token's exact contribution to decode(tokens) (" upon", "<s>"), as logprobs show it.
    ojson pieces = ojson::array();
    StreamDecoder dec(tok, /*skip_special=*/false);
    for (int32_t id : ids) {
      dec.push(id);
      pieces.push_back(alternative({id, 0, dec.last_bytes()}).token);
    }
    out["pieces"] = std::move(pieces);
  }
  return out;
}

ojson CompletionService::detokenize(const ojson& body) const {
  const std::vector<int32_t> ids =
      parse_detokenize_request(body, (int)engine_.config().vocab_size);
  std::string text = valid_utf8(engine_.tokenizer().decode(ids, false));
  return ojson{{"prompt", text}, {"content", text}};
}

}  // namespace perfx::server
