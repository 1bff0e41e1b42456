// Fuzz target: encode/decode of arbitrary bytes with each shared tokenizer (../shared/tokenizers:
// llama2 SentencePiece from its GGUF vocabulary, llama3 and qwen3 byte-level BPE, mistral BPE with
// byte fallback), loaded once in LLVMFuzzerInitialize; a missing tokenizer stops the run with a
// message and exit code 2. Each input is encoded with and without special-token parsing, and its
// bytes are also read as little-endian u32 token ids to decode.
// Invariants: encode returns ids in [0, vocab); decode() is valid UTF-8; the StreamDecoder's pieces
// concatenate to decode(); for the byte-level vocabularies decode(encode(text)) == text for valid
// UTF-8 text without special-token parsing (llama3: any such text; qwen3: text its NFC normalizer
// leaves unchanged). Nothing may throw: these tokenizers accept any input.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "fuzz_common.h"
#include "fuzz_decode.h"
#include "perfx/status.h"
#include "perfx/tokenizer.h"
#include "tokenizer/unicode_norm.h"

using namespace perfx;

namespace {

struct Loaded {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
  enum { None, Exact, ExactIfNfc } round_trip;
};
std::vector<Loaded>* g_toks = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::shared_dir() + "/tokenizers";
  g_toks = new std::vector<Loaded>();
  try {
    const std::string gguf_path = dir + "/llama2/ggml-vocab-llama-spm.gguf";
    auto f = gguf::File::open(gguf_path);
    g_toks->push_back({"llama2", Tokenizer::from_gguf(*f), Loaded::None});
    g_toks->push_back({"llama3", Tokenizer::from_hf_dir(dir + "/llama3"), Loaded::Exact});
    g_toks->push_back({"mistral", Tokenizer::from_hf_dir(dir + "/mistral"), Loaded::None});
    g_toks->push_back({"qwen3", Tokenizer::from_hf_dir(dir + "/qwen3"), Loaded::ExactIfNfc});
  } catch (const Error& e) {
    fuzz::die(std::string("cannot load the shared tokenizers (set PERFX_SHARED_DIR to the folder "
                          "holding tokenizers/): ") + e.what());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool valid = fuzz::is_valid_utf8(text);
  std::vector<int32_t> raw_ids;
  for (size_t i = 0; i + 4 <= size && raw_ids.size() < 64; i += 4) {
    uint32_t v;
    std::memcpy(&v, data + i, 4);
    raw_ids.push_back((int32_t)v);  // any value: decode ignores ids outside the vocabulary
  }
  for (const Loaded& l : *g_toks) {
    const Tokenizer& tok = *l.tok;
    const int32_t vocab = tok.vocab_size();
    for (bool special : {false, true}) {
      const auto ids = tok.encode(text, /*add_bos=*/special, special);
      for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < vocab, "encode id out of range");
      fuzz::check_decode(tok, ids);
      if (!special && valid &&
          (l.round_trip == Loaded::Exact ||
           (l.round_trip == Loaded::ExactIfNfc && tok::to_nfc(text) == text)))
        FUZZ_ASSERT(tok.decode(ids) == text, "decode(encode(text)) != text");
    }
    std::vector<int32_t> in_vocab;
    for (int32_t id : raw_ids)
      if (id >= 0) in_vocab.push_back((int32_t)((uint32_t)id % (uint32_t)vocab));
    fuzz::check_decode(tok, in_vocab);
    (void)tok.decode(raw_ids);
  }
  return 0;
}
