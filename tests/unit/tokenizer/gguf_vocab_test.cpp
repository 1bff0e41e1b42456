// Tokenizers from GGUF vocabularies: the real llama-spm and stories260K files, and byte-level
// ("gpt2") vocabs written here from the Llama-3 and Qwen3 tokenizer.json files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "perfx/status.h"
#include "tok_test_util.h"

namespace perfx::test {
namespace {

int count_matches(const Tokenizer& tok, const std::vector<Vector>& vecs, bool expect_all) {
  int ok = 0;
  for (size_t i = 0; i < vecs.size(); ++i) {
    const auto got = tok.encode(vecs[i].text, false);
    if (expect_all) {
      EXPECT_EQ(got, vecs[i].ids) << "vector #" << i << " '" << vecs[i].text << "'\n got "
                                  << ids_str(got) << "\n want " << ids_str(vecs[i].ids);
    }
    ok += got == vecs[i].ids;
  }
  return ok;
}

TEST(TokenizerGguf, LlamaSpmMatchesAllVectors) {
  PERFX_REQUIRE_SHARED("tokenizers/llama2/ggml-vocab-llama-spm.gguf");
  auto f = gguf::File::open(shared_path("tokenizers/llama2/ggml-vocab-llama-spm.gguf"));
  auto tok = Tokenizer::from_gguf(*f);
  const auto vecs = read_vectors("tokenizers/llama2/ggml-vocab-llama-spm.gguf.inp",
                                 "tokenizers/llama2/ggml-vocab-llama-spm.gguf.out");
  ASSERT_EQ(vecs.size(), 46u);
  EXPECT_EQ(count_matches(*tok, vecs, true), 46);
  for (const auto& v : vecs) EXPECT_EQ(tok->decode(v.ids), v.text);
  EXPECT_EQ(tok->encode("Hello world", false), (std::vector<int32_t>{15043, 3186}));
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{2}));
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->eos_token(), "</s>");
  EXPECT_TRUE(tok->add_bos_by_default());
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_TRUE(tok->is_special(0));  // <unk>
  EXPECT_FALSE(tok->is_special(15043));
  EXPECT_EQ(tok->encode("<s>Hi", false), tok->encode("<s>Hi", false, true));
  EXPECT_EQ(tok->encode("<s>Hi", false).front(), 1);
  EXPECT_NE(tok->encode("<s>Hi", false, false).front(), 1);
  EXPECT_EQ(tok->decode({1, 15043, 3186}, true), "Hello world");
  for (const auto& v : vecs) {
    StreamDecoder sd(*tok);
    std::string s;
    for (int32_t id : v.ids) s += sd.push(id);
    s += sd.finish();
    EXPECT_EQ(s, v.text);
  }
}

// stories260K.gguf carries the tok512 vocab (llama2.c's convert script). llama.cpp-style SPM
// encoding never collapses runs of spaces, so it gives run.c's ids; real SentencePiece (with
// remove_extra_whitespaces) differs on 16 whitespace-heavy strings.
TEST(TokenizerGguf, Stories260KMatchesRunCNotSentencePiece) {
  PERFX_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  auto f = gguf::File::open(shared_path("models/stories260K/stories260K.gguf"));
  auto tok = Tokenizer::from_gguf(*f);
  const auto runc = read_vectors("models/stories260K/tok512_spm_vectors.inp",
                                 "models/stories260K/tok512_runc_vectors.out");
  const auto spm = read_vectors("models/stories260K/tok512_spm_vectors.inp",
                                "models/stories260K/tok512_spm_vectors.out");
  ASSERT_EQ(runc.size(), 46u);
  EXPECT_EQ(count_matches(*tok, runc, true), 46);
  const int spm_ok = count_matches(*tok, spm, false);
  std::printf("[stories260K.gguf] run.c vectors 46/46, SentencePiece vectors %d/46\n", spm_ok);
  EXPECT_LT(spm_ok, 46);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{2}));
  EXPECT_TRUE(tok->add_bos_by_default());  // key absent: SentencePiece default
  // Same ids and text as the tokenizer.json of the HF conversion.
  if (path_exists_for_test(shared_path("models/stories260K-hf/tokenizer.json"))) {
    const Tokenizer& hf = hf_tokenizer("models/stories260K-hf");
    for (const auto& v : runc) {
      EXPECT_EQ(tok->encode(v.text, true), hf.encode(v.text, true)) << v.text;
      EXPECT_EQ(tok->decode(v.ids), hf.decode(v.ids)) << v.text;
    }
  }
}

// ---- a minimal GGUF v3 writer for vocab-only files ----
class GgufWriter {
 public:
  void str(const std::string& k, const std::string& v) {
    key(k, 8);
    s(v);
    ++n_;
  }
  void u32(const std::string& k, uint32_t v) {
    key(k, 4);
    raw(&v, 4);
    ++n_;
  }
  void i32(const std::string& k, int32_t v) {
    key(k, 5);
    raw(&v, 4);
    ++n_;
  }
  void boolean(const std::string& k, bool v) {
    key(k, 7);
    const uint8_t b = v;
    raw(&b, 1);
    ++n_;
  }
  void strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    arr_head(8, v.size());
    for (const auto& x : v) s(x);
    ++n_;
  }
  void f32s(const std::string& k, const std::vector<float>& v) {
    key(k, 9);
    arr_head(6, v.size());
    raw(v.data(), v.size() * 4);
    ++n_;
  }
  void i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    arr_head(5, v.size());
    raw(v.data(), v.size() * 4);
    ++n_;
  }
  void write(const std::string& path) const {
    std::string out = "GGUF";
    const uint32_t version = 3;
    const uint64_t n_tensors = 0, n_kv = n_;
    out.append(reinterpret_cast<const char*>(&version), 4);
    out.append(reinterpret_cast<const char*>(&n_tensors), 8);
    out.append(reinterpret_cast<const char*>(&n_kv), 8);
    out += body_;
    while (out.size() % 32) out.push_back('\0');
    std::ofstream(path, std::ios::binary) << out;
  }

 private:
  void raw(const void* p, size_t n) { body_.append(static_cast<const char*>(p), n); }
  void s(const std::string& v) {
    const uint64_t n = v.size();
    raw(&n, 8);
    body_ += v;
  }
  void key(const std::string& k, uint32_t type) {
    s(k);
    raw(&type, 4);
  }
  void arr_head(uint32_t elem, uint64_t n) {
    raw(&elem, 4);
    raw(&n, 8);
  }
  std::string body_;
  uint64_t n_ = 0;
};

// Writes a "gpt2" GGUF vocab from a tokenizer.json the way llama.cpp's converter lays it out.
std::string write_gpt2_gguf(const std::string& tokenizer_dir, const std::string& pre) {
  const auto j = nlohmann::json::parse(read_file(shared_path(tokenizer_dir + "/tokenizer.json")));
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it) {
    const size_t id = it.value().get<size_t>();
    if (id >= tokens.size()) tokens.resize(id + 1), types.resize(id + 1, 1);
    tokens[id] = it.key();
  }
  for (const auto& a : j["added_tokens"]) {
    const size_t id = a["id"].get<size_t>();
    if (id >= tokens.size()) tokens.resize(id + 1), types.resize(id + 1, 1);
    tokens[id] = a["content"].get<std::string>();
    types[id] = a["special"].get<bool>() ? 3 : 4;
  }
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.str("tokenizer.ggml.model", "gpt2");
  w.str("tokenizer.ggml.pre", pre);
  w.strs("tokenizer.ggml.tokens", tokens);
  w.i32s("tokenizer.ggml.token_type", types);
  w.strs("tokenizer.ggml.merges", merges);
  w.u32("tokenizer.ggml.bos_token_id", pre == "qwen2" ? 151643 : 128000);
  w.u32("tokenizer.ggml.eos_token_id", pre == "qwen2" ? 151645 : 128001);
  if (pre != "qwen2") w.u32("tokenizer.ggml.eot_token_id", 128009);
  w.boolean("tokenizer.ggml.add_bos_token", pre != "qwen2");
  w.str("tokenizer.chat_template", "{{ messages }}");
  const std::string path =
      ::testing::TempDir() + "/perfx_tok_" + pre + "_" + std::to_string(::getpid()) + ".gguf";
  w.write(path);
  return path;
}

TEST(TokenizerGguf, Gpt2LlamaBpeMatchesLlama3Vectors) {
  PERFX_REQUIRE_SHARED("tokenizers/llama3/tokenizer.json");
  const std::string path = write_gpt2_gguf("tokenizers/llama3", "llama-bpe");
  auto f = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  std::remove(path.c_str());
  const auto vecs = read_vectors("tokenizers/llama3/ggml-vocab-llama-bpe.gguf.inp",
                                 "tokenizers/llama3/ggml-vocab-llama-bpe.gguf.out");
  EXPECT_EQ(count_matches(*tok, vecs, true), 46);
  for (const auto& v : vecs) EXPECT_EQ(tok->decode(v.ids), v.text);
  EXPECT_EQ(tok->encode("<|begin_of_text|>Hello", false), (std::vector<int32_t>{128000, 9906}));
  EXPECT_EQ(tok->encode("Hello", true), (std::vector<int32_t>{128000, 9906}));
  EXPECT_TRUE(tok->add_bos_by_default());
  // eos and eot (named by the file; <|eot_id|> would also be found by its text). This early
  // Llama-3 vocab has no <|eom_id|> (128008 is a reserved token here).
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{128001, 128009}));
  EXPECT_TRUE(tok->is_special(128009));
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
}

TEST(TokenizerGguf, Gpt2Qwen2MatchesQwenVectors) {
  PERFX_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  const std::string path = write_gpt2_gguf("tokenizers/qwen3", "qwen2");
  auto f = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  std::remove(path.c_str());
  const auto vecs = read_vectors("tokenizers/qwen3/ggml-vocab-qwen2.gguf.inp",
                                 "tokenizers/qwen3/ggml-vocab-qwen2.gguf.out");
  EXPECT_EQ(count_matches(*tok, vecs, true), 46);
  EXPECT_EQ(tok->encode("<|im_start|>user", false), (std::vector<int32_t>{151644, 872}));
  EXPECT_EQ(tok->encode("<think>", false, false), (std::vector<int32_t>{151667}));  // user-defined
  EXPECT_FALSE(tok->add_bos_by_default());
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{151645, 151643}));
}

TEST(TokenizerGguf, UnsupportedModelOrPreIsAnError) {
  const std::string dir = ::testing::TempDir();
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "t5");
    w.strs("tokenizer.ggml.tokens", {"a"});
    w.write(dir + "/perfx_tok_t5.gguf");
    auto f = gguf::File::open(dir + "/perfx_tok_t5.gguf");
    try {
      Tokenizer::from_gguf(*f);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'t5'"), std::string::npos) << e.what();
    }
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", "deepseek-coder");
    w.strs("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.strs("tokenizer.ggml.merges", {"a b"});
    w.write(dir + "/perfx_tok_pre.gguf");
    auto f = gguf::File::open(dir + "/perfx_tok_pre.gguf");
    try {
      Tokenizer::from_gguf(*f);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("deepseek-coder"), std::string::npos) << e.what();
    }
  }
  {
    GgufWriter w;
    w.str("general.architecture", "llama");
    w.write(dir + "/perfx_tok_none.gguf");
    auto f = gguf::File::open(dir + "/perfx_tok_none.gguf");
    EXPECT_THROW(Tokenizer::from_gguf(*f), Error);
  }
  std::remove((dir + "/perfx_tok_t5.gguf").c_str());
  std::remove((dir + "/perfx_tok_pre.gguf").c_str());
  std::remove((dir + "/perfx_tok_none.gguf").c_str());
}

// A BOS id outside the vocabulary was dropped without a word (the prompt silently lost its BOS);
// only -1 and ids >= 2^31 (llama.cpp's 0xFFFFFFFF) mean "no BOS".
TEST(TokenizerGguf, BosIdOutsideTheVocabularyIsAnError) {
  const std::string path =
      ::testing::TempDir() + "/perfx_tok_bos_" + std::to_string(::getpid()) + ".gguf";
  auto load = [&](auto set_bos) {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "llama");
    w.strs("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>",
                                     "\xE2\x96\x81"
                                     "a"});
    w.f32s("tokenizer.ggml.scores", {0, 0, 0, -1});
    set_bos(w);
    w.write(path);
    auto f = gguf::File::open(path);
    return Tokenizer::from_gguf(*f);
  };
  for (int32_t bad : {9999, 4, -2}) {
    try {
      load([&](GgufWriter& w) { w.i32("tokenizer.ggml.bos_token_id", bad); });
      ADD_FAILURE() << "bos " << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), path + ": tokenizer.ggml.bos_token_id " +
                                           std::to_string(bad) +
                                           " is not a token id (the vocabulary has 4 tokens)");
    }
  }
  EXPECT_EQ(load([](GgufWriter& w) { w.u32("tokenizer.ggml.bos_token_id", 1); })->encode("a", true),
            (std::vector<int32_t>{1, 3}));
  for (auto none : {+[](GgufWriter& w) { w.i32("tokenizer.ggml.bos_token_id", -1); },
                    +[](GgufWriter& w) { w.u32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu); },
                    +[](GgufWriter&) {}}) {
    auto tok = load(none);
    EXPECT_EQ(tok->bos_id(), -1);
    EXPECT_EQ(tok->encode("a", true), (std::vector<int32_t>{3}));
  }
  // A BOS the file never prepends (add_bos_token false) is left alone, as llama.cpp only warns.
  auto unused = load([](GgufWriter& w) {
    w.i32("tokenizer.ggml.bos_token_id", 9999);
    w.boolean("tokenizer.ggml.add_bos_token", false);
  });
  EXPECT_EQ(unused->encode("a", true), (std::vector<int32_t>{3}));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace perfx::test
