// Text a user can trust (issue 8), through the HTTP server with the shared real tokenizers and a
// scripted FakeEngine model: continuations keep their leading space (prompt text + completion ==
// decode(all ids)), logprob tokens are each token's exact text (concatenating to the text, one
// entry per id, the same text_offset streamed or not), one BOS rule on every route, and the
// penalties' coverage (repetition: prompt + output; presence / frequency: output only).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>

#include "formats/gguf.h"
#include "support/test_support.h"
#include "test_server.h"

namespace perfx::server {
namespace {

using json = nlohmann::ordered_json;
using test::FakeEngineOptions;
using test::TestServer;

// The shared tokenizers, loaded once; null when the fixture is missing.
const Tokenizer* shared_tokenizer(const std::string& rel) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto it = cache.find(rel);
  if (it != cache.end()) return it->second.get();
  const bool gguf = rel.size() > 5 && rel.compare(rel.size() - 5, 5, ".gguf") == 0;
  const std::string path = test::shared_path(rel);
  std::unique_ptr<Tokenizer> tok;
  if (test::path_exists_for_test(gguf ? path : path + "/tokenizer.json"))
    tok = gguf ? Tokenizer::from_gguf(*gguf::File::open(path)) : Tokenizer::from_hf_dir(path);
  return (cache[rel] = std::move(tok)).get();
}

const char* const kShared[] = {"models/stories260K-hf",
                               "models/stories260K/stories260K.gguf",
                               "tokenizers/llama2/ggml-vocab-llama-spm.gguf",
                               "tokenizers/mistral",
                               "tokenizers/llama3",
                               "tokenizers/qwen3"};

// A model that continues a registered prompt with registered ids (then EOS), logit 12 for the
// scripted token and 1 for its successor; other histories get EOS. Requests run one at a time.
struct Script {
  std::mutex mu;
  std::vector<int32_t> prompt, out;
  std::vector<std::vector<int32_t>> seen;  // every history the model was asked about
  int32_t eos = 1;

  void set(std::vector<int32_t> p, std::vector<int32_t> o) {
    std::lock_guard<std::mutex> lk(mu);
    prompt = std::move(p);
    out = std::move(o);
  }
  void operator()(const std::vector<int32_t>& h, std::vector<float>& row) {
    std::lock_guard<std::mutex> lk(mu);
    seen.push_back(h);
    int32_t next = eos;
    if (h.size() >= prompt.size() && std::equal(prompt.begin(), prompt.end(), h.begin()) &&
        h.size() - prompt.size() < out.size())
      next = out[h.size() - prompt.size()];
    row[(size_t)next] = 12.0f;
    row[(size_t)(next + 1) % row.size()] = 1.0f;
  }
};

FakeEngineOptions scripted(const Tokenizer* tok, const std::shared_ptr<Script>& script) {
  FakeEngineOptions o;
  o.ctx = 1024;
  o.kv_tokens = 8192;
  o.tokenizer = tok;
  script->eos = tok->eos_ids().empty() ? 0 : tok->eos_ids()[0];
  o.config_eos = {script->eos};
  o.model = [script](const std::vector<int32_t>& h, std::vector<float>& row) { (*script)(h, row); };
  return o;
}

std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  for (size_t k = 0, e; (e = body.find("\n\n", k)) != std::string::npos; k = e + 2)
    if (body.compare(k, 6, "data: ") == 0) out.push_back(body.substr(k + 6, e - k - 6));
  return out;
}

// A completion's text and logprobs, plain or streamed (chunks joined).
struct Completion {
  std::string text, finish;
  std::vector<std::string> tokens;
  std::vector<int64_t> offsets;
  std::vector<json> tops;
  int prompt_tokens = -1;
};
Completion complete(const TestServer& s, json req, bool stream) {
  req["stream"] = stream;
  if (stream) req["stream_options"] = {{"include_usage", true}};
  auto r = s.post("/v1/completions", req.dump());
  Completion c;
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  if (!r || r->status != 200) return c;
  std::vector<json> parts;
  if (stream) {
    for (const std::string& d : sse_data(r->body))
      if (d != "[DONE]") parts.push_back(json::parse(d));
  } else {
    parts.push_back(json::parse(r->body));
  }
  for (const json& j : parts) {
    if (j.contains("usage") && j["usage"].is_object())
      c.prompt_tokens = j["usage"]["prompt_tokens"];
    if (j["choices"].empty()) continue;
    const json& ch = j["choices"][0];
    c.text += ch["text"].get<std::string>();
    if (ch["finish_reason"].is_string()) c.finish = ch["finish_reason"];
    if (!ch["logprobs"].is_object()) continue;
    for (const auto& t : ch["logprobs"]["tokens"]) c.tokens.push_back(t);
    for (const auto& o : ch["logprobs"]["text_offset"]) c.offsets.push_back(o);
    for (const auto& t : ch["logprobs"]["top_logprobs"]) c.tops.push_back(t);
  }
  return c;
}

size_t chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Acceptance property (items 1 and 2): for many prompt/continuation splits of the same text on
// every shared tokenizer, prompt text + completion text == decode(all ids); logprob tokens
// concatenate to the text with the same text_offset streamed and plain; /tokenize gives the ids
// the completion fed the model.
TEST(ServerText, ContinuationAndLogprobTokensOverSharedTokenizers) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl.",
      "Hello world\n\n  indented\tand  two spaces",
      "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\xA6\x99 caf\xC3\xA9",
  };
  int tokenizers = 0;
  for (const char* rel : kShared) {
    const Tokenizer* tok = shared_tokenizer(rel);
    if (!tok) {
      EXPECT_FALSE(test::fixtures_required()) << "missing " << rel;
      continue;
    }
    ++tokenizers;
    auto script = std::make_shared<Script>();
    TestServer s(scripted(tok, script));
    for (const std::string& text : texts) {
      for (size_t k = 0; k < text.size(); ++k) {
        if (((unsigned char)text[k] & 0xC0) == 0x80) continue;  // split between characters
        const std::string prompt = text.substr(0, k);
        const std::vector<int32_t> p = encode_prompt(*tok, prompt);
        const std::vector<int32_t> out = tok->encode(text.substr(k), false);
        if (p.empty() || out.empty()) continue;
        script->set(p, out);
        std::vector<int32_t> all = p;
        all.insert(all.end(), out.begin(), out.end());
        const std::string where = std::string(rel) + " '" + prompt + "' + '" + text.substr(k) + "'";
        json req = {
            {"prompt", prompt}, {"max_tokens", out.size()}, {"temperature", 0}, {"logprobs", 3}};
        const Completion plain = complete(s, req, false), streamed = complete(s, req, true);
        EXPECT_EQ(tok->decode(p, true) + plain.text, tok->decode(all, true)) << where;
        EXPECT_EQ(streamed.text, plain.text) << where;
        EXPECT_EQ(plain.prompt_tokens, (int)p.size()) << where;
        EXPECT_EQ(streamed.prompt_tokens, (int)p.size()) << where;
        for (const Completion* c : {&plain, &streamed}) {
          ASSERT_EQ(c->tokens.size(), out.size()) << where;
          std::string joined;
          for (size_t i = 0; i < c->tokens.size(); ++i) {
            EXPECT_EQ(c->offsets[i], (int64_t)chars(joined)) << where << " token " << i;
            joined += c->tokens[i];
            EXPECT_EQ(c->tops[i].size(), 3u) << where << " " << c->tops[i].dump();
          }
          EXPECT_EQ(joined, c->text) << where;
        }
        EXPECT_EQ(streamed.offsets, plain.offsets) << where;
        EXPECT_EQ(streamed.tokens, plain.tokens) << where;
      }
    }
    // /tokenize reports what completions feed the model.
    auto t = s.post("/tokenize", json{{"prompt", texts[0]}}.dump());
    ASSERT_TRUE(t && t->status == 200);
    EXPECT_EQ(json::parse(t->body)["tokens"].get<std::vector<int32_t>>(),
              encode_prompt(*tok, texts[0]))
        << rel;
    // Chat: the reply continues the rendered template; content tokens concatenate to the content
    // and their bytes to its bytes.
    const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    auto ct = s.post("/tokenize", chat.dump());
    ASSERT_TRUE(ct && ct->status == 200);
    const std::vector<int32_t> p = json::parse(ct->body)["tokens"].get<std::vector<int32_t>>();
    const std::vector<int32_t> out = tok->encode(" there was a", false);
    script->set(p, out);
    json creq = chat;
    creq.update(
        {{"max_tokens", out.size()}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}});
    auto cr = s.post("/v1/chat/completions", creq.dump());
    ASSERT_TRUE(cr && cr->status == 200) << (cr ? cr->body : "");
    const json cj = json::parse(cr->body);
    std::vector<int32_t> all = p;
    all.insert(all.end(), out.begin(), out.end());
    const std::string content = cj["choices"][0]["message"]["content"];
    EXPECT_EQ(tok->decode(p, true) + content, tok->decode(all, true)) << rel;
    std::string joined, bytes;
    for (const auto& e : cj["choices"][0]["logprobs"]["content"]) {
      joined += e["token"].get<std::string>();
      for (int b : e["bytes"]) bytes.push_back((char)b);
      EXPECT_EQ(e["top_logprobs"].size(), 2u);
    }
    EXPECT_EQ(joined, content) << rel;
    EXPECT_EQ(bytes, content) << rel;
    EXPECT_EQ(cj["usage"]["prompt_tokens"], p.size());
  }
  EXPECT_GE(tokenizers, 1);
}

// The issue's example: "Once upon a time," continues with " there" on stories260K's vocabulary, in
// plain, streamed and echoed completions, and a stop string " time" after "Once upon a" fires.
TEST(ServerText, ContinuationKeepsItsLeadingSpace) {
  const Tokenizer* tok = shared_tokenizer("models/stories260K-hf");
  if (!tok) PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  auto script = std::make_shared<Script>();
  TestServer s(scripted(tok, script));
  script->set(encode_prompt(*tok, "Once upon a time,"), tok->encode("there was", false));
  json req = {{"prompt", "Once upon a time,"}, {"max_tokens", 2}, {"temperature", 0}};
  EXPECT_EQ(complete(s, req, false).text, " there was");
  EXPECT_EQ(complete(s, req, true).text, " there was");
  req["echo"] = true;
  EXPECT_EQ(complete(s, req, false).text, "Once upon a time, there was");
  EXPECT_EQ(complete(s, req, true).text, "Once upon a time, there was");

  script->set(encode_prompt(*tok, "Once upon a"), tok->encode("time there", false));
  const Completion stopped = complete(
      s, {{"prompt", "Once upon a"}, {"max_tokens", 4}, {"temperature", 0}, {"stop", " time"}},
      false);
  EXPECT_EQ(stopped.text, "");
  EXPECT_EQ(stopped.finish, "stop");
}

// Item 2: distinct tokens never share a logprobs entry; partial characters show their own bytes.
TEST(ServerText, LogprobTokensAreExactAndNeverMerged) {
  const Tokenizer* tok = shared_tokenizer("models/stories260K-hf");
  if (!tok) PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  auto id = [&](const char* t) {
    const int32_t i = tok->token_to_id(t);
    EXPECT_GE(i, 0) << t;
    return i;
  };
  const int32_t sp_l = id("\xE2\x96\x81l"), l = id("l"), byte_a = id("<0x41>"), a = id("A");
  const int32_t e6 = id("<0xE6>"), e7 = id("<0xE7>"), sp = id("\xE2\x96\x81");
  FakeEngineOptions o;
  o.tokenizer = tok;
  o.config_eos = {2};
  o.model = [=](const std::vector<int32_t>&, std::vector<float>& row) {
    row[(size_t)sp_l] = 9.0f;
    row[(size_t)l] = 8.9f;
    row[(size_t)a] = 8.8f;
    row[(size_t)byte_a] = 8.7f;
    row[(size_t)e6] = 8.6f;
    row[(size_t)e7] = 8.5f;
    row[(size_t)sp] = 8.4f;
  };
  TestServer s(o);
  const json req = {{"prompt", "Once upon a time, there was a"},
                    {"max_tokens", 1},
                    {"temperature", 0},
                    {"logprobs", 7}};
  for (bool stream : {false, true}) {
    const Completion c = complete(s, req, stream);
    ASSERT_EQ(c.tokens.size(), 1u);
    EXPECT_EQ(c.tokens[0], " l");
    EXPECT_EQ(c.text, " l");
    ASSERT_EQ(c.tops.size(), 1u);
    const json& top = c.tops[0];
    EXPECT_EQ(top.size(), 7u) << top.dump();
    for (const char* key : {" l", "l", "A", " ", "bytes:\\xe6", "bytes:\\xe7"})
      EXPECT_TRUE(top.contains(key)) << key << " in " << top.dump();
    // "A" and <0x41> are the same text: the less likely one is named by its id.
    EXPECT_TRUE(top.contains("token_id:" + std::to_string(byte_a))) << top.dump();
    EXPECT_GT(top[" l"].get<double>(), top["l"].get<double>());
  }
  // Chat: token, bytes and alternatives with their own bytes (the partial byte is [0xE6]).
  auto r = s.post("/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                      "temperature": 0, "logprobs": true, "top_logprobs": 7})");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  const json e = json::parse(r->body)["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(e["token"], " l");
  EXPECT_EQ(e["bytes"], json::array({32, 108}));
  std::map<std::string, json> alts;
  for (const auto& t : e["top_logprobs"]) alts[t["token"]] = t["bytes"];
  EXPECT_EQ(alts.size(), 6u) << e.dump();  // "A" twice, as two list entries
  EXPECT_EQ(e["top_logprobs"].size(), 7u);
  EXPECT_EQ(alts["bytes:\\xe6"], json::array({0xE6}));
  EXPECT_EQ(alts[" "], json::array({32}));
  EXPECT_EQ(alts["l"], json::array({108}));
}

// Item 2: a character split over byte tokens is released by its last byte; each token's bytes are
// its own; text_offset is the same streamed and plain; /tokenize pieces keep "▁" as " ".
TEST(ServerText, ByteTokensOfOneCharacter) {
  const Tokenizer* tok = shared_tokenizer("models/stories260K-hf");
  if (!tok) PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  auto script = std::make_shared<Script>();
  TestServer s(scripted(tok, script));
  const std::vector<int32_t> out = {tok->token_to_id("\xE2\x96\x81"), tok->token_to_id("<0xE4>"),
                                    tok->token_to_id("<0xBD>"), tok->token_to_id("<0xA0>"),
                                    tok->token_to_id("\xE2\x96\x81there")};
  script->set(encode_prompt(*tok, "Hi"), out);
  const json req = {{"prompt", "Hi"}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 0}};
  const Completion plain = complete(s, req, false), streamed = complete(s, req, true);
  EXPECT_EQ(plain.text, " \xE4\xBD\xA0 there");
  const std::vector<std::string> want = {" ", "", "", "\xE4\xBD\xA0", " there"};
  EXPECT_EQ(plain.tokens, want);
  EXPECT_EQ(streamed.tokens, want);
  EXPECT_EQ(plain.offsets, (std::vector<int64_t>{0, 1, 1, 1, 2}));
  EXPECT_EQ(streamed.offsets, plain.offsets);

  auto r = s.post("/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                      "temperature": 0, "logprobs": true})");
  ASSERT_TRUE(r && r->status == 200);
  // The chat prompt differs: script it.
  auto t = s.post("/tokenize", R"({"messages": [{"role": "user", "content": "hi"}]})");
  script->set(json::parse(t->body)["tokens"].get<std::vector<int32_t>>(), out);
  r = s.post("/v1/chat/completions",
             R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                 "temperature": 0, "logprobs": true})");
  ASSERT_TRUE(r && r->status == 200);
  const json content = json::parse(r->body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u);
  EXPECT_EQ(content[0]["token"], " ");
  EXPECT_EQ(content[0]["bytes"], json::array({32}));
  EXPECT_EQ(content[1]["bytes"], json::array({0xE4}));
  EXPECT_EQ(content[3]["token"], "\xE4\xBD\xA0");
  EXPECT_EQ(content[3]["bytes"], json::array({0xA0}));

  auto pieces = s.post("/tokenize", R"({"prompt": "Once upon  a", "with_pieces": true})");
  ASSERT_TRUE(pieces && pieces->status == 200);
  const json pj = json::parse(pieces->body);
  std::string joined;
  for (const auto& p : pj["pieces"]) joined += p.get<std::string>();
  EXPECT_EQ(joined, tok->decode(pj["tokens"].get<std::vector<int32_t>>(), false));
  EXPECT_EQ(pj["pieces"][0], "<s>");
  EXPECT_EQ(pj["pieces"][1], " Once");
  EXPECT_NE(std::find(pj["pieces"].begin(), pj["pieces"].end(), json(" ")), pj["pieces"].end())
      << pj.dump();
}

// Item 3: the same ids for the same prompt on /tokenize and completions; a double BOS is kept.
TEST(ServerText, OneBosRuleOnEveryRoute) {
  const Tokenizer* st = shared_tokenizer("models/stories260K-hf");
  if (!st) PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  auto script = std::make_shared<Script>();
  {
    TestServer s(scripted(st, script));
    auto t = s.post("/tokenize", R"({"prompt": "<s>Once upon a time"})");
    ASSERT_TRUE(t && t->status == 200);
    const std::vector<int32_t> want = {1, 1, 403, 407, 261, 378};
    EXPECT_EQ(json::parse(t->body)["tokens"].get<std::vector<int32_t>>(), want);
    script->seen.clear();
    const Completion c = complete(
        s, {{"prompt", "<s>Once upon a time"}, {"max_tokens", 1}, {"temperature", 0}}, false);
    EXPECT_EQ(c.prompt_tokens, 6);
    ASSERT_FALSE(script->seen.empty());
    EXPECT_EQ(script->seen[0], want) << "what the model was fed";
  }
  const Tokenizer* l3 = shared_tokenizer("tokenizers/llama3");
  if (!l3) return;
  TestServer s(scripted(l3, script));
  auto t = s.post("/tokenize", R"({"prompt": "Hello world"})");
  ASSERT_TRUE(t && t->status == 200);
  EXPECT_EQ(json::parse(t->body)["tokens"], json::array({9906, 1917}));
  EXPECT_EQ(complete(s, {{"prompt", "Hello world"}, {"max_tokens", 1}}, false).prompt_tokens, 2);
  t = s.post("/tokenize", R"({"prompt": ""})");
  ASSERT_TRUE(t && t->status == 200);
  EXPECT_EQ(json::parse(t->body)["tokens"], json::array({128000}));
  EXPECT_EQ(complete(s, {{"prompt", ""}, {"max_tokens", 1}}, false).prompt_tokens, 1);
}

// Item 4: repetition_penalty covers the prompt; presence / frequency penalties only the output.
TEST(ServerText, PenaltiesCoverWhatTheyMeanElsewhere) {
  FakeEngineOptions o;
  const test::FakeTokenizer chars_tok;
  const int32_t a = chars_tok.encode("a", false, true)[0],
                b = chars_tok.encode("b", false, true)[0];
  o.model = [=](const std::vector<int32_t>&, std::vector<float>& row) {
    row[(size_t)a] = 2.0f;
    row[(size_t)b] = 1.9f;
  };
  TestServer s(o);
  auto text = [&](const std::string& extra) {
    json req = json::parse(R"({"prompt": "a, a,", "max_tokens": 3, "temperature": 0})");
    req.update(json::parse(extra));
    return complete(s, req, false).text;
  };
  EXPECT_EQ(text("{}"), "aaa");
  // 'a' is in the prompt: 2.0 / 1.3 < 1.9 from the first token on; then 'b' is penalised too.
  EXPECT_EQ(text(R"({"repetition_penalty": 1.3})"), "baa");
  // Output only: the first 'a' is free, then 2.0 - 0.5 < 1.9 (and 'b' pays too once generated).
  EXPECT_EQ(text(R"({"presence_penalty": 0.5})"), "aba");
  EXPECT_EQ(text(R"({"frequency_penalty": 0.15})"), "aba");
}

}  // namespace
}  // namespace perfx::server
