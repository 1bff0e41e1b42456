// Text that continues a prompt (issue 8, items 1 and 3): StreamDecoder with the prompt as context
// gives HF decode(prompt + output) minus decode(prompt) on every shared tokenizer, and
// encode_prompt is the one BOS rule.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "formats/gguf.h"
#include "perfx/tokenizer.h"
#include "tok_test_util.h"

namespace perfx::test {
namespace {

const Tokenizer& gguf_tokenizer(const std::string& rel) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[rel];
  if (!slot) slot = Tokenizer::from_gguf(*gguf::File::open(shared_path(rel)));
  return *slot;
}

struct Shared {
  const char* name;
  const char* path;  // a tokenizer folder, or a .gguf file
};

// SentencePiece-style (stories, Llama 2 GGUF, Mistral) and byte-level (Llama 3, Qwen3).
const Shared kShared[] = {
    {"stories260K-hf", "models/stories260K-hf"},
    {"stories260K.gguf", "models/stories260K/stories260K.gguf"},
    {"llama2 GGUF vocab", "tokenizers/llama2/ggml-vocab-llama-spm.gguf"},
    {"mistral", "tokenizers/mistral"},
    {"llama3", "tokenizers/llama3"},
    {"qwen3", "tokenizers/qwen3"},
};

// The shared tokenizers that are present (a missing one fails with PERFX_REQUIRE_FIXTURES=1).
std::vector<std::pair<std::string, const Tokenizer*>> shared_tokenizers() {
  std::vector<std::pair<std::string, const Tokenizer*>> out;
  for (const Shared& s : kShared) {
    const std::string p = s.path;
    const bool gguf = p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0;
    const std::string probe = gguf ? p : p + "/tokenizer.json";
    if (!path_exists_for_test(shared_path(probe))) {
      EXPECT_FALSE(fixtures_required()) << "shared fixture missing: " << shared_path(probe);
      continue;
    }
    out.emplace_back(s.name, gguf ? &gguf_tokenizer(p) : &hf_tokenizer(p));
  }
  return out;
}

// What a server or `perfx run` shows for `out` generated after `prompt`, token by token: each
// push()'s text, and the bytes each token added.
struct Continuation {
  std::string text;
  std::vector<std::string> pieces, bytes;
};
Continuation continue_after(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& out) {
  StreamDecoder sd(tok, /*skip_special=*/true, prompt);
  Continuation c;
  for (int32_t id : out) {
    c.pieces.push_back(sd.push(id));
    c.bytes.push_back(sd.last_bytes());
    c.text += c.pieces.back();
  }
  const std::string tail = sd.finish();
  c.text += tail;
  if (!c.pieces.empty()) c.pieces.back() += tail;
  return c;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TokenizerContinuation, KeepsTheLeadingSpaceOfAContinuation) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  for (const auto& [name, tok] : shared_tokenizers()) {
    const std::vector<int32_t> prompt = encode_prompt(*tok, "Once upon a time,");
    const std::vector<int32_t> all = encode_prompt(*tok, "Once upon a time, there was");
    ASSERT_LT(prompt.size(), all.size()) << name;
    ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), all.begin())) << name;
    const std::vector<int32_t> out(all.begin() + (long)prompt.size(), all.end());
    EXPECT_EQ(continue_after(*tok, prompt, out).text, " there was") << name;
    // After the BOS alone the text starts the sequence: SentencePiece's space strip applies.
    const std::vector<int32_t> bos_only = encode_prompt(*tok, "");
    const std::vector<int32_t> text_ids = tok->encode("Once upon a time, there was", false);
    EXPECT_EQ(continue_after(*tok, bos_only, text_ids).text, "Once upon a time, there was") << name;
  }
}

// Acceptance property: for many prompt/continuation splits of the same text, prompt text +
// continuation text == decode(all ids), and the tokens' pieces concatenate to the continuation.
TEST(TokenizerContinuation, PromptTextPlusContinuationIsDecodeOfAllIds) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      " leading space and  two spaces",
      "Hello world\n\n  indented\tand tabs \n",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C and \xF0\x9F\xA6\x99 emoji",
      "e\xCC\x81 combining, 3.14159 numbers, don't",
  };
  if (path_exists_for_test(shared_path("tokenizers/llama2/ggml-vocab-llama-spm.gguf.inp")))
    for (const std::string& s : split_vocab_tests(
             read_file(shared_path("tokenizers/llama2/ggml-vocab-llama-spm.gguf.inp"))))
      texts.push_back(s);
  for (const auto& [name, tok] : shared_tokenizers()) {
    int checked = 0;
    for (const std::string& text : texts) {
      // Splits at every token of the whole text's ids.
      const std::vector<int32_t> all = encode_prompt(*tok, text);
      const std::string want = tok->decode(all, true);
      for (size_t j = 1; j < all.size(); ++j) {
        const std::vector<int32_t> p(all.begin(), all.begin() + (long)j);
        const std::vector<int32_t> out(all.begin() + (long)j, all.end());
        const Continuation c = continue_after(*tok, p, out);
        const std::string prompt_text = tok->decode(p, true);
        if (!valid_utf8(tok->decode_bytes(p, true))) continue;  // the prompt ends mid-character
        EXPECT_EQ(prompt_text + c.text, want) << name << " split " << j << " of " << ids_str(all);
        std::string joined;
        for (const std::string& piece : c.pieces) joined += piece;
        EXPECT_EQ(joined, c.text) << name;
        std::string bytes;
        for (const std::string& b : c.bytes) bytes += b;
        EXPECT_EQ(tok->decode_bytes(p, true) + bytes, tok->decode_bytes(all, true)) << name;
        ++checked;
      }
      // Splits of the text at every character: the prompt is encoded on its own (as a user's
      // prompt is), the continuation is the rest's ids without BOS.
      for (size_t k = 0; k <= text.size(); ++k) {
        if (k < text.size() && ((unsigned char)text[k] & 0xC0) == 0x80) continue;
        const std::vector<int32_t> p = encode_prompt(*tok, text.substr(0, k));
        if (p.empty()) continue;  // no BOS to start from (Qwen3)
        const std::vector<int32_t> out = tok->encode(text.substr(k), false);
        const std::vector<int32_t> both = cat(p, out);
        EXPECT_EQ(tok->decode(p, true) + continue_after(*tok, p, out).text, tok->decode(both, true))
            << name << " '" << text.substr(0, k) << "' + '" << text.substr(k) << "'";
        ++checked;
      }
    }
    EXPECT_GT(checked, 1000) << name;
  }
}

TEST(TokenizerContinuation, BytesOfAPartialCharacterAreItsOwn) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  const Tokenizer& tok = hf_tokenizer("models/stories260K-hf");
  // 你 is three byte-fallback tokens in the 512-piece vocabulary.
  const std::vector<int32_t> prompt = encode_prompt(tok, "A");
  const std::vector<int32_t> out = {tok.token_to_id("<0xE4>"), tok.token_to_id("<0xBD>"),
                                    tok.token_to_id("<0xA0>"), tok.token_to_id("\xE2\x96\x81")};
  const Continuation c = continue_after(tok, prompt, out);
  EXPECT_EQ(c.bytes, (std::vector<std::string>{"\xE4", "\xBD", "\xA0", " "}));
  EXPECT_EQ(c.pieces, (std::vector<std::string>{"", "", "\xE4\xBD\xA0", " "}));
  // peek() tells what a token would add without feeding it.
  StreamDecoder sd(tok, true, prompt);
  sd.push(out[0]);
  EXPECT_EQ(sd.peek(out[1]).bytes, "\xBD");
  EXPECT_EQ(sd.peek(out[1]).text, "");
  EXPECT_EQ(sd.peek(tok.token_to_id("\xE2\x96\x81there")).text, "\xEF\xBF\xBD there");
  EXPECT_EQ(sd.push(out[1]), "");
}

TEST(TokenizerPrompt, OneBosRule) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  const Tokenizer& st = hf_tokenizer("models/stories260K-hf");
  bool dbl = false;
  // A BOS written in the text is kept beside the one the tokenizer adds, as HF does, and flagged.
  EXPECT_EQ(encode_prompt(st, "<s>Once upon a time", true, false, &dbl),
            (std::vector<int32_t>{1, 1, 403, 407, 261, 378}));
  EXPECT_TRUE(dbl);
  EXPECT_EQ(encode_prompt(st, "Once upon a time", true, false, &dbl),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_FALSE(dbl);
  // A rendered chat template that writes the BOS gets no second one.
  EXPECT_EQ(encode_prompt(st, "<s>Once upon a time", true, true, &dbl),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_FALSE(dbl);
  EXPECT_EQ(encode_prompt(st, ""), std::vector<int32_t>{1});
  EXPECT_EQ(encode_prompt(st, "", false), std::vector<int32_t>{});
  EXPECT_EQ(encode_prompt(st, "Once", false), std::vector<int32_t>{403});
  if (path_exists_for_test(shared_path("models/stories260K/stories260K.gguf"))) {
    const Tokenizer& g = gguf_tokenizer("models/stories260K/stories260K.gguf");
    EXPECT_EQ(encode_prompt(g, "<s>Once upon a time", true, false, &dbl),
              (std::vector<int32_t>{1, 1, 403, 407, 261, 378}));
    EXPECT_TRUE(dbl);
  }
  if (path_exists_for_test(shared_path("tokenizers/llama3/tokenizer.json"))) {
    // This early Llama-3 tokenizer.json adds no BOS (no TemplateProcessing, no add_bos_token), as
    // in HF; an empty prompt still starts from BOS.
    const Tokenizer& l3 = hf_tokenizer("tokenizers/llama3");
    EXPECT_EQ(encode_prompt(l3, "Hello world"), (std::vector<int32_t>{9906, 1917}));
    EXPECT_EQ(encode_prompt(l3, ""), std::vector<int32_t>{128000});
  }
  if (path_exists_for_test(shared_path("tokenizers/qwen3/tokenizer.json"))) {
    const Tokenizer& q = hf_tokenizer("tokenizers/qwen3");
    EXPECT_EQ(encode_prompt(q, ""), std::vector<int32_t>{});  // no BOS at all
    EXPECT_EQ(encode_prompt(q, "Hello world"), (std::vector<int32_t>{9707, 1879}));
  }
  if (path_exists_for_test(shared_path("tokenizers/mistral/tokenizer.json"))) {
    const Tokenizer& m = hf_tokenizer("tokenizers/mistral");
    EXPECT_EQ(encode_prompt(m, "Hello world"), (std::vector<int32_t>{1, 22557, 1526}));
  }
}

}  // namespace
}  // namespace perfx::test
