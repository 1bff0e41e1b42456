// decode() against golden text, and StreamDecoder == decode() for every test vector.
#include <gtest/gtest.h>

#include "perfx/status.h"
#include "perfx/tokenizer.h"
#include "tok_test_util.h"

namespace perfx::test {
namespace {

// Streams `ids` and checks each push() is valid UTF-8 and the total equals decode().
void expect_stream_equals_decode(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                 bool skip_special, const std::string& what) {
  StreamDecoder sd(tok, skip_special);
  std::string all;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = sd.push(ids[i]);
    EXPECT_TRUE(valid_utf8(piece)) << what << " push #" << i;
    all += piece;
  }
  const std::string tail = sd.finish();
  EXPECT_TRUE(valid_utf8(tail)) << what;
  all += tail;
  EXPECT_EQ(all, tok.decode(ids, skip_special)) << what << " ids " << ids_str(ids);
}

std::vector<int32_t> golden_ids() {
  const std::string f = read_file(shared_path("models/stories260K-hf/golden_greedy_n256.ids"));
  const size_t p = f.find("IDS:", f.find('\n'));
  std::vector<int32_t> ids;
  for (int id : parse_ints(f.substr(p + 4, f.find('\n', p) - p - 4))) ids.push_back(id);
  return ids;
}

TEST(TokenizerDecode, Stories260KGoldenText) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/golden_greedy_n256.ids");
  const Tokenizer& tok = hf_tokenizer("models/stories260K-hf");
  const std::vector<int32_t> ids = golden_ids();
  ASSERT_EQ(ids.size(), 256u);
  std::string want = read_file(shared_path("models/stories260K-hf/golden_greedy_n256.txt"));
  ASSERT_EQ(want.back(), '\n');
  want.pop_back();
  EXPECT_EQ(tok.decode(ids), want);
  // With the BOS prompt in front and skipped, the text is the same.
  std::vector<int32_t> with_bos = ids;
  with_bos.insert(with_bos.begin(), 1);
  EXPECT_EQ(tok.decode(with_bos, true), want);
  expect_stream_equals_decode(tok, ids, true, "golden");
  expect_stream_equals_decode(tok, with_bos, true, "golden+bos");
  expect_stream_equals_decode(tok, with_bos, false, "golden+bos kept");
}

struct Fixture {
  const char* dir;
  const char* inp;
  const char* out;
};

const Fixture kFixtures[] = {
    {"tokenizers/llama3", "tokenizers/llama3/ggml-vocab-llama-bpe.gguf.inp",
     "tokenizers/llama3/ggml-vocab-llama-bpe.gguf.out"},
    {"tokenizers/qwen3", "tokenizers/qwen3/ggml-vocab-qwen2.gguf.inp",
     "tokenizers/qwen3/ggml-vocab-qwen2.gguf.out"},
    {"models/stories260K-hf", "models/stories260K/tok512_spm_vectors.inp",
     "models/stories260K/tok512_runc_vectors.out"},
};

// Extra strings: CJK, emoji, combining marks, leading spaces (the SentencePiece strip).
const char* const kExtra[] = {
    " leading space",
    "  two leading spaces",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",
    "emoji \xF0\x9F\xA6\x99\xF0\x9F\x9A\x80 mid\xF0\x9F\x98\x81"
    "end",
    "\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
    "e\xCC\x81 a\xCC\x8A",
    "\n\n  \t tabs and\nnewlines \n",
};

TEST(TokenizerDecode, StreamEqualsDecodeForAllVectors) {
  for (const Fixture& fx : kFixtures) {
    if (!path_exists_for_test(shared_path(std::string(fx.dir) + "/tokenizer.json"))) continue;
    const Tokenizer& tok = hf_tokenizer(fx.dir);
    std::vector<std::string> texts;
    for (const Vector& v : read_vectors(fx.inp, fx.out)) texts.push_back(v.text);
    for (const char* s : kExtra) texts.push_back(s);
    for (const std::string& t : texts) {
      for (bool bos : {false, true}) {
        const auto ids = tok.encode(t, bos);
        expect_stream_equals_decode(tok, ids, true, std::string(fx.dir) + " '" + t + "'");
        expect_stream_equals_decode(tok, ids, false, std::string(fx.dir) + " '" + t + "'");
      }
    }
  }
}

TEST(TokenizerDecode, ByteFallbackSplitsCharactersAcrossTokens) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/tokenizer.json");
  const Tokenizer& tok = hf_tokenizer("models/stories260K-hf");
  // 512 pieces: CJK and emoji become <0xXX> byte tokens, 3-4 per character.
  const std::string text = "A\xE4\xBD\xA0\xF0\x9F\xA6\x99z";
  const auto ids = tok.encode(text, false);
  ASSERT_GE(ids.size(), 9u);
  size_t k = 0;  // the first byte token of 你 (after "▁" and "A" pieces)
  while (k < ids.size() && tok.id_to_token(ids[k]) != "<0xE4>") ++k;
  ASSERT_LT(k + 2, ids.size());
  EXPECT_EQ(tok.decode(ids), text);
  StreamDecoder sd(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(sd.push(id));
  pieces.push_back(sd.finish());
  std::string all;
  for (const auto& p : pieces) {
    EXPECT_TRUE(valid_utf8(p));
    all += p;
  }
  EXPECT_EQ(all, text);
  // The character is released with its last byte token, not later.
  EXPECT_EQ(pieces[k], "");
  EXPECT_EQ(pieces[k + 1], "");
  EXPECT_EQ(pieces[k + 2], "\xE4\xBD\xA0");

  // Invalid sequences: a lone continuation byte and a truncated character become U+FFFD.
  const int32_t e4 = tok.token_to_id("<0xE4>"), bd = tok.token_to_id("<0xBD>");
  const int32_t x80 = tok.token_to_id("<0x80>");
  ASSERT_GE(e4, 0);
  std::vector<int32_t> bad(ids.begin(), ids.begin() + k);  // "A"
  for (int32_t id : {x80, e4, bd, ids.back(), e4}) bad.push_back(id);
  EXPECT_EQ(tok.decode(bad), "A\xEF\xBF\xBD\xEF\xBF\xBDz\xEF\xBF\xBD");
  expect_stream_equals_decode(tok, bad, true, "invalid bytes");
}

TEST(TokenizerDecode, ByteLevelSplitsCharactersAcrossTokens) {
  PERFX_REQUIRE_SHARED("tokenizers/llama3/tokenizer.json");
  const Tokenizer& tok = hf_tokenizer("tokenizers/llama3");
  // Rare CJK/emoji need several byte-level tokens per character.
  const std::string text = "\xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 \xE1\x9E\x80\xE1\x9E\xB6";
  const auto ids = tok.encode(text, false);
  EXPECT_GT(ids.size(), 3u);
  expect_stream_equals_decode(tok, ids, true, "llama3 emoji");
  // Any single token of a multi-token character decodes to U+FFFD-repaired text.
  for (int32_t id : ids) EXPECT_TRUE(valid_utf8(tok.decode({id})));
}

TEST(TokenizerDecode, IgnoresUnknownIds) {
  PERFX_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  const Tokenizer& tok = hf_tokenizer("tokenizers/qwen3");
  // Qwen3's model has 151936 embedding rows but the tokenizer only 151669 ids.
  EXPECT_EQ(tok.decode({9707, 151900, -1, 1879}), "Hello world");
  StreamDecoder sd(tok);
  std::string s = sd.push(9707);
  s += sd.push(151900);
  s += sd.push(1879);
  s += sd.finish();
  EXPECT_EQ(s, "Hello world");
  EXPECT_EQ(tok.id_to_token(151900), "");
}

TEST(TokenizerDecode, IgnoresIdsWithoutAToken) {
  // Found by tests/fuzz/fuzz_tokenizer_json (corpus regress-stream-hole): id 2 is a hole in the
  // vocab. decode() fed it to the chain as "", and StreamDecoder took it as the context token, so
  // the Strip decoder saw " a" as the start of the text and dropped its space.
  const auto tok = Tokenizer::from_hf_json(
      R"({"model": {"type": "BPE", "vocab": {"b": 0, "▁": 1, "▁a": 3}, "merges": []},
          "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})",
      "");
  ASSERT_EQ(tok->vocab_size(), 4);
  EXPECT_EQ(tok->id_to_token(2), "");
  EXPECT_EQ(tok->decode({0, 2, 3}), "b a");
  EXPECT_EQ(tok->decode({2, 3}), "a");  // the hole is not a first token
  expect_stream_equals_decode(*tok, {0, 2, 3}, false, "hole");
  expect_stream_equals_decode(*tok, {0, 1, 2, 3, 2}, false, "holes");
}

TEST(TokenizerDecode, StripDecoderOtherThanOneLeadingIsRejected) {
  // Found by tests/fuzz/fuzz_tokenizer_json (corpus regress-strip-start-2): with start 2 the
  // decoder removed the spaces of two tokens (" " + " a" -> "a"), so StreamDecoder's text
  // differed from decode(). Such a chain is refused; start 1 (Llama, Mistral) streams exactly.
  const std::string head = R"({"model": {"type": "BPE", "vocab": {"▁": 0, "▁a": 1, "b": 2},
      "merges": []}, "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": )";
  // And stop > 0 stripped the end of each two-token window ("<s>" + " " + "</s>" streamed as
  // "<s></s>"; regress-strip-stop).
  for (const char* bad : {"2, \"stop\": 0}]}}", "1, \"stop\": 5}]}}"}) {
    try {
      Tokenizer::from_hf_json(head + bad, "");
      ADD_FAILURE() << "accepted Strip start " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unsupported Strip decoder with start"),
                std::string::npos)
          << e.what();
    }
  }
  // A content of two characters (HF requires one) streamed "  b" where decode() gave "a  b" (found
  // by fuzz_tokenizer_json in a CI run).
  std::string two = head + "1, \"stop\": 0}]}}";
  two.replace(two.find(R"("content": " ", "start")"), 23, R"("content": "  ", "start")");
  try {
    Tokenizer::from_hf_json(two, "");
    ADD_FAILURE() << "accepted a Strip content of two characters";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Strip decoder content must be one character"),
              std::string::npos)
        << e.what();
  }
  const auto tok = Tokenizer::from_hf_json(head + "1, \"stop\": 0}]}}", "");
  EXPECT_EQ(tok->decode({0, 1, 0, 0, 2}), " a  b");
  expect_stream_equals_decode(*tok, {0, 1, 0, 0, 2}, false, "strip 1");
}

}  // namespace
}  // namespace perfx::test
