// Tokenizer from the vocabulary embedded in a GGUF file (tokenizer.ggml.*, FORMATS.md §4.2).
//
// tokenizer.ggml.model:
//   "llama": SentencePiece-style: tokens + scores + token_type; score-based BPE with <0xXX> byte
//            fallback; " " -> "▁" and a leading "▁" per text segment (add_space_prefix, default
//            true); decoding drops that one leading space.
//   "gpt2":  byte-level BPE with tokenizer.ggml.merges; the pre-tokenizer regex is chosen by
//            tokenizer.ggml.pre (see kPreTypes below); anything else is an error.
// Token types: 2 unknown and 3 control are special added tokens (matched only with
// parse_special, skipped by decode(skip_special)); 4 user-defined are added tokens that are always
// matched and kept on decode.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "perfx/status.h"
#include "perfx/tokenizer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"

namespace perfx {
namespace {

using tok::PipelineTokenizer;

constexpr int32_t kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4;
const char* const kMetaspace = "\xE2\x96\x81";  // ▁

// llama.cpp's default BPE pre-tokenizer: several regexes, each splitting the previous pieces.
const char* const kDefaultChain[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};
const char* const kGpt2NoTrailing =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

struct PreType {
  const char* names;  // comma-separated tokenizer.ggml.pre values
  enum Kind { kLlama3, kQwen2, kGpt2, kDigitsGpt2, kDefault } kind;
};
const PreType kPreTypes[] = {
    {"llama-bpe,llama3,llama-v3,dbrx,smaug-bpe", PreType::kLlama3},
    {"qwen2,stablelm2", PreType::kQwen2},
    {"gpt-2,gpt2,mpt,olmo,jais", PreType::kGpt2},
    {"smollm,starcoder,refact,command-r,codeshell,exaone", PreType::kDigitsGpt2},
    {"default", PreType::kDefault},
};

bool name_in(const std::string& name, const char* list) {
  const std::string l = std::string(",") + list + ",";
  return l.find("," + name + ",") != std::string::npos;
}

void setup_gpt2_pre(const gguf::File& f, const std::string& pre, PipelineTokenizer& t,
                    bool& ignore_merges) {
  const PreType* found = nullptr;
  for (const PreType& p : kPreTypes)
    if (name_in(pre, p.names)) found = &p;
  if (!found) {
    std::string supported;
    for (const PreType& p : kPreTypes)
      supported += std::string(supported.empty() ? "" : ",") + p.names;
    throw Error(f.path() + ": unsupported tokenizer.ggml.pre '" + pre +
                "' for a gpt2 (byte-level BPE) vocab; supported: " + supported);
  }
  auto split = [&](const char* pattern) {
    t.pretokenizer.add_split(std::make_shared<const tok::Regex>(pattern),
                             tok::SplitBehavior::kIsolated, false);
  };
  switch (found->kind) {
    case PreType::kLlama3:
      split(tok::kLlama3Pattern);
      ignore_merges = true;
      break;
    case PreType::kQwen2:
      // The HF tokenizer these vocabs come from NFC-normalizes first (llama.cpp does not).
      t.normalizer.add_nfc();
      split(tok::kQwen2Pattern);
      break;
    case PreType::kGpt2:
      split(kGpt2NoTrailing);
      break;
    case PreType::kDigitsGpt2:
      split(R"(\p{N})");
      split(kGpt2NoTrailing);
      break;
    case PreType::kDefault:
      for (const char* p : kDefaultChain) split(p);
      break;
  }
  t.pretokenizer.add_byte_level(/*add_prefix_space=*/false, /*use_regex=*/false);
}

int32_t id_or_none(const gguf::File& f, const std::string& key, int32_t n) {
  const int64_t v = f.get_int(key, -1);
  return (v >= 0 && v < n) ? static_cast<int32_t>(v) : -1;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  const std::string model = f.get_string("tokenizer.ggml.model", "");
  if (model.empty())
    throw Error(f.path() + ": no tokenizer.ggml.model (the GGUF holds no tokenizer)");
  if (model != "llama" && model != "gpt2")
    throw Error(f.path() + ": unsupported tokenizer.ggml.model '" + model +
                "' (supported: llama = SentencePiece BPE, gpt2 = byte-level BPE)");
  const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (tokens.empty()) throw Error(f.path() + ": tokenizer.ggml.tokens is missing or empty");
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> types = f.get_int_array("tokenizer.ggml.token_type");
  if (!types.empty() && static_cast<int32_t>(types.size()) != n)
    throw Error(f.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                " entries for " + std::to_string(n) + " tokens");
  types.resize(n, 1);

  auto t = std::make_unique<PipelineTokenizer>();
  auto vocab = std::make_shared<tok::Vocab>();
  vocab->reserve(n);
  for (int32_t i = 0; i < n; ++i) vocab->set(i, tokens[i]);
  for (int32_t i = 0; i < n; ++i) {
    if (types[i] != kTypeControl && types[i] != kTypeUnknown && types[i] != kTypeUserDefined)
      continue;
    tok::AddedToken a;
    a.id = i;
    a.content = tokens[i];
    a.special = types[i] != kTypeUserDefined;
    t->added.push_back(std::move(a));
  }
  const int32_t unk = id_or_none(f, "tokenizer.ggml.unknown_token_id", n);

  if (model == "llama") {
    std::vector<float> scores = f.get_float_array("tokenizer.ggml.scores");
    if (static_cast<int32_t>(scores.size()) != n)
      throw Error(f.path() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                  " entries for " + std::to_string(n) + " tokens");
    const bool space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
    if (space_prefix) t->normalizer.add_prepend(kMetaspace);
    t->normalizer.add_replace_string(" ", kMetaspace);
    t->model = std::make_unique<tok::SpmModel>(vocab, std::move(scores), unk);
    t->decoder.add_replace_string(kMetaspace, " ");
    t->decoder.add_byte_fallback();
    t->decoder.add_fuse();
    if (space_prefix) t->decoder.add_strip(" ", 1, 0);
    t->add_bos_default = f.get_bool("tokenizer.ggml.add_bos_token", true);
  } else {
    bool ignore_merges = false;
    setup_gpt2_pre(f, f.get_string("tokenizer.ggml.pre", "default"), *t, ignore_merges);
    tok::BpeModel::Options o;
    o.unk_id = unk;
    o.ignore_merges = ignore_merges;
    auto bpe = std::make_unique<tok::BpeModel>(vocab, o);
    const std::vector<std::string> merges = f.get_string_array("tokenizer.ggml.merges");
    if (merges.empty()) throw Error(f.path() + ": tokenizer.ggml.merges is missing or empty");
    bpe->reserve_merges(merges.size());
    for (const std::string& r : merges) {
      const size_t sp = r.find(' ', 1);  // a part never starts with a space, but "Ġ" does
      if (sp == std::string::npos)
        throw Error(f.path() + ": merge rule '" + r + "' is not of the form \"a b\"");
      bpe->add_merge(std::string_view(r).substr(0, sp), std::string_view(r).substr(sp + 1));
    }
    t->model = std::move(bpe);
    t->decoder.add_byte_level();
    t->add_bos_default = f.get_bool("tokenizer.ggml.add_bos_token", false);
  }
  t->vocab = std::move(vocab);
  t->finalize();

  // An absent id, -1 or one >= 2^31 (llama.cpp writes 0xFFFFFFFF) means "no BOS"; any other id
  // outside the vocabulary, where prompts get a BOS, is a broken file, not a reason to drop the BOS
  // silently (with add_bos_token false it is never used: left alone, as llama.cpp only warns).
  if (const int64_t b = f.get_int("tokenizer.ggml.bos_token_id", -1);
      t->add_bos_default && b != -1 && b <= std::numeric_limits<int32_t>::max() &&
      (b < 0 || b >= n))
    throw Error(f.path() + ": tokenizer.ggml.bos_token_id " + std::to_string(b) +
                " is not a token id (the vocabulary has " + std::to_string(n) + " tokens)");
  t->bos = id_or_none(f, "tokenizer.ggml.bos_token_id", n);
  // End of generation: EOS, plus the end-of-turn / end-of-message ids the file names.
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = id_or_none(f, key, n);
    if (id >= 0 && std::find(t->eos.begin(), t->eos.end(), id) == t->eos.end())
      t->eos.push_back(id);
  }
  // GGUF has no generation_config.json: like llama.cpp, also stop on the end-of-turn control
  // tokens of the common chat formats when the vocab has them.
  for (const char* text :
       {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"}) {
    const int32_t id = t->token_to_id(text);
    if (id >= 0 && types[id] == kTypeControl &&
        std::find(t->eos.begin(), t->eos.end(), id) == t->eos.end())
      t->eos.push_back(id);
  }
  t->template_text = f.get_string("tokenizer.chat_template", "");
  return t;
}

}  // namespace perfx
