// The pipeline parts on small synthetic inputs: split behaviours, pre-tokenizers, added-token
// matching, BPE options, Metaspace, decoders.
#include <gtest/gtest.h>

#include "perfx/status.h"
#include "perfx/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/pretokenize.h"

namespace perfx::tok {
namespace {

std::vector<std::string> split(SplitBehavior b, const std::string& text) {
  Regex re("-", /*literal=*/true);
  std::vector<PreToken> out;
  split_by_regex(re, b, false, PreToken{text, true}, out);
  std::vector<std::string> s;
  for (const auto& p : out) s.push_back(p.text);
  return s;
}

using V = std::vector<std::string>;

TEST(TokParts, SplitBehaviours) {
  // The example of the tokenizers documentation.
  const std::string t = "the-final--countdown";
  EXPECT_EQ(split(SplitBehavior::kRemoved, t), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kIsolated, t), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithPrevious, t), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithNext, t), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(SplitBehavior::kContiguous, t), (V{"the", "-", "final", "--", "countdown"}));
}

V run(const PreTokenizer& p, const std::string& text, bool at_start = true) {
  std::vector<PreToken> out;
  p.run(text, at_start, out);
  V s;
  for (const auto& w : out) s.push_back(w.text);
  return s;
}

TEST(TokParts, PreTokenizers) {
  PreTokenizer gpt2;
  gpt2.add_byte_level(/*add_prefix_space=*/true, /*use_regex=*/true);
  EXPECT_EQ(run(gpt2, "Hello world's  x"),
            (V{"\xC4\xA0Hello", "\xC4\xA0world", "'s", "\xC4\xA0", "\xC4\xA0x"}));
  PreTokenizer digits;
  digits.add_digits(true);
  EXPECT_EQ(run(digits, "a123b"), (V{"a", "1", "2", "3", "b"}));
  PreTokenizer runs;
  runs.add_digits(false);
  EXPECT_EQ(run(runs, "a123b4"), (V{"a", "123", "b", "4"}));
  PreTokenizer ws;
  ws.add_whitespace();
  EXPECT_EQ(run(ws, "Hey  man!! ok"), (V{"Hey", "man", "!!", "ok"}));
  PreTokenizer wss;
  wss.add_whitespace_split();
  EXPECT_EQ(run(wss, " Hey  man!! "), (V{"Hey", "man!!"}));
  PreTokenizer punct;
  punct.add_punctuation(SplitBehavior::kIsolated);
  EXPECT_EQ(run(punct, "Hey, man!?"), (V{"Hey", ",", " man", "!", "?"}));
  // Metaspace: the HF tests' "Hey   friend!".
  PreTokenizer ms;
  ms.add_metaspace("\xE2\x96\x81", PrependScheme::kAlways, true);
  EXPECT_EQ(run(ms, "Hey   friend!"), (V{"\xE2\x96\x81Hey", "\xE2\x96\x81", "\xE2\x96\x81",
                                         "\xE2\x96\x81"
                                         "friend!"}));
  PreTokenizer first;
  first.add_metaspace("\xE2\x96\x81", PrependScheme::kFirst, false);
  EXPECT_EQ(run(first, "Hey my", true), (V{"\xE2\x96\x81Hey\xE2\x96\x81my"}));
  EXPECT_EQ(run(first, "how are", false), (V{"how\xE2\x96\x81"
                                             "are"}));
  EXPECT_EQ(run(first, " Hey", true), (V{"\xE2\x96\x81Hey"}));  // already starts with ▁
}

std::vector<Segment> match(const AddedToken& t, const std::string& text,
                           bool parse_special = true) {
  AddedTokenMatcher m;
  m.add(t);
  AddedToken other;
  other.content = "<mask>x";  // a longer token sharing the prefix
  other.id = 9;
  m.add(other);
  std::vector<Segment> segs;
  m.split(text, parse_special, segs);
  return segs;
}

TEST(TokParts, AddedTokenMatching) {
  AddedToken mask;
  mask.content = "<mask>";
  mask.id = 7;
  auto s = match(mask, "a <mask> b");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].id, 7);
  EXPECT_EQ(s[1].begin, 2u);
  EXPECT_EQ(s[1].end, 8u);
  s = match(mask, "a<mask>x<mask>");  // longest match wins
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].id, 9);
  EXPECT_EQ(s[2].id, 7);
  mask.lstrip = true;
  s = match(mask, "a  <mask> b");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].end, 1u);  // "a"
  EXPECT_EQ(s[1].begin, 1u);
  mask.lstrip = false;
  mask.rstrip = true;
  s = match(mask, "a <mask>  b");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].end, 10u);
  EXPECT_EQ(s[2].begin, 10u);  // "b"
  mask.rstrip = false;
  mask.single_word = true;
  EXPECT_EQ(match(mask, "x<mask> y").size(), 1u);  // inside a word: no match
  EXPECT_EQ(match(mask, "x <mask> y").size(), 3u);
  mask.single_word = false;
  mask.special = true;
  EXPECT_EQ(match(mask, "a <mask> b", /*parse_special=*/false).size(), 1u);
}

const char* kMetaspaceJson = R"({
  "added_tokens": [{"id": 4, "content": "<s>", "special": true, "normalized": false}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "SCHEME",
                    "split": true},
  "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "SCHEME"},
  "post_processor": {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "special_tokens": {"<s>": {"id": "<s>", "ids": [4], "tokens": ["<s>"]}}},
  "model": {"type": "BPE", "vocab": {"\u2581": 0, "a": 1, "b": 2, "\u2581a": 3, "<s>": 4,
            "\u2581b": 5, "ab": 6, "\u2581ab": 7},
            "merges": [["\u2581", "a"], ["a", "b"], ["\u2581a", "b"], ["\u2581", "b"]]}
})";

std::unique_ptr<Tokenizer> metaspace_tok(const std::string& scheme) {
  std::string j = kMetaspaceJson;
  for (size_t p; (p = j.find("SCHEME")) != std::string::npos;) j.replace(p, 6, scheme);
  return Tokenizer::from_hf_json(j, "");
}

using Ids = std::vector<int32_t>;

TEST(TokParts, MetaspacePrependSchemes) {
  auto first = metaspace_tok("first");
  EXPECT_EQ(first->encode("ab ab", false), (Ids{7, 7}));
  EXPECT_EQ(first->encode("<s>ab", false), (Ids{4, 6}));  // not at the start: no ▁
  EXPECT_EQ(first->encode(" ab", false), (Ids{7}));
  EXPECT_EQ(first->decode({7, 7}), "ab ab");
  EXPECT_EQ(first->bos_id(), 4);
  EXPECT_TRUE(first->add_bos_by_default());
  EXPECT_EQ(first->encode("ab", true), (Ids{4, 7}));
  auto always = metaspace_tok("always");
  EXPECT_EQ(always->encode("<s>ab", false), (Ids{4, 7}));
  auto never = metaspace_tok("never");
  EXPECT_EQ(never->encode("ab b", false), (Ids{6, 5}));
  EXPECT_EQ(never->decode({6, 5}), "ab b");
  EXPECT_EQ(never->decode({5, 6}), " bab");
  // Streaming reproduces the first-token rule of the Metaspace decoder.
  for (const Tokenizer* t : {first.get(), never.get()}) {
    const Ids ids = {7, 5, 4, 3, 0, 0, 6};
    StreamDecoder sd(*t, /*skip_special=*/false);
    std::string s;
    for (int32_t id : ids) s += sd.push(id);
    s += sd.finish();
    EXPECT_EQ(s, t->decode(ids));
  }
}

TEST(TokParts, BpeUnknownsAndSubwordPrefix) {
  const char* fused = R"({"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": FUSE,
      "vocab": {"<unk>": 0, "a": 1}, "merges": []}})";
  std::string j = fused;
  j.replace(j.find("FUSE"), 4, "true");
  EXPECT_EQ(Tokenizer::from_hf_json(j, "")->encode("axyza", false), (Ids{1, 0, 1}));
  j = fused;
  j.replace(j.find("FUSE"), 4, "false");
  EXPECT_EQ(Tokenizer::from_hf_json(j, "")->encode("axyza", false), (Ids{1, 0, 0, 0, 1}));
  // WordPiece-style continuing prefix: "a" "##b" merge into "ab".
  const char* prefixed = R"({"model": {"type": "BPE", "continuing_subword_prefix": "##",
      "vocab": {"a": 0, "##b": 1, "ab": 2, "b": 3}, "merges": ["a ##b"]},
      "pre_tokenizer": {"type": "WhitespaceSplit"}})";
  EXPECT_EQ(Tokenizer::from_hf_json(prefixed, "")->encode("ab b", false), (Ids{2, 3}));
}

TEST(TokParts, NormalizedAddedTokensMatchNormalizedText) {
  auto t = Tokenizer::from_hf_json(R"({"normalizer": {"type": "Lowercase"},
      "added_tokens": [{"id": 3, "content": "<X>", "normalized": true, "special": false},
                       {"id": 4, "content": "<Y>", "normalized": false, "special": true}],
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "y": 2}, "merges": []}})",
                                   "");
  EXPECT_EQ(t->encode("A<X>b<x>", false), (Ids{0, 3, 1, 3}));
  EXPECT_EQ(t->encode("A<Y>b<y>", false).at(1), 4);  // raw match, case-sensitive
  EXPECT_EQ(t->encode("a<y>", false).size(), 2u);    // "<", ">" unknown: dropped
  EXPECT_EQ(t->decode({0, 3, 4, 1}), "a <X> <Y> b");
}

TEST(TokParts, ConfigTokensAndTemplates) {
  const std::string tj = R"({"model": {"type": "BPE", "vocab": {"a": 0, "<s>": 1, "</s>": 2,
      "<eot>": 3}, "merges": []}})";
  auto t = Tokenizer::from_hf_json(tj, R"({"bos_token": {"content": "<s>", "special": true},
      "eos_token": "</s>", "add_bos_token": true,
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_ids(), (Ids{2}));
  EXPECT_TRUE(t->add_bos_by_default());
  EXPECT_EQ(t->chat_template(), "D");
  // No decoder: tokens are joined with spaces (HF's behaviour).
  EXPECT_EQ(t->decode({0, 0}), "a a");
  auto none = Tokenizer::from_hf_json(tj, R"({"bos_token": null})");
  EXPECT_EQ(none->bos_id(), -1);
  EXPECT_FALSE(none->add_bos_by_default());
  EXPECT_THROW(
      Tokenizer::from_hf_json(
          R"({"model": {"type": "BPE", "vocab": {}}, "normalizer": {"type": "NFKC"}})", ""),
      Error);
  EXPECT_THROW(Tokenizer::from_hf_json(
                   R"({"model": {"type": "BPE", "vocab": {}}, "decoder": {"type": "CTC"}})", ""),
               Error);
}

// A post-processor BOS id outside the vocabulary (9999 of 8 tokens) was put in front of every
// prompt as an id the model does not have, or dropped: an error naming the id and the size.
TEST(TokParts, PostProcessorBosIdOutsideTheVocabularyIsAnError) {
  for (const char* bad : {"9999", "8", "-2"}) {
    std::string j = kMetaspaceJson;
    for (size_t p; (p = j.find("SCHEME")) != std::string::npos;) j.replace(p, 6, "first");
    const std::string ids = "\"ids\": [4]";
    j.replace(j.find(ids), ids.size(), "\"ids\": [" + std::string(bad) + "]");
    try {
      Tokenizer::from_hf_json(j, "");
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find(std::string("post_processor BOS id ") + bad +
                                     " ('<s>') is not a token id (the vocabulary has 8 tokens)"),
          std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(metaspace_tok("first")->encode("ab", true), (Ids{4, 7}));  // the id in range: kept
}

}  // namespace
}  // namespace perfx::tok
