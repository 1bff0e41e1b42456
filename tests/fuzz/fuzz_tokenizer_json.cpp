// Fuzz target: tokenizer.json (+ tokenizer_config.json) text -> Tokenizer
// (Tokenizer::from_hf_json, src/tokenizer/hf_tokenizer.cpp and the pipeline it builds: normalizers,
// pre-tokenizers with their PCRE2 patterns, BPE model, added tokens, decoders, post-processor).
// Input: tokenizer.json text, optionally followed by a NUL byte and tokenizer_config.json text.
// A tokenizer that loads then encodes a few fixed strings and decodes ids 0..min(vocab, 300).
// Invariants: bad input is rejected only with perfx::Error; encode returns ids in [0, vocab);
// decode() is valid UTF-8 (documented: invalid bytes become U+FFFD); the StreamDecoder's pieces
// concatenate to decode() (its documented contract).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "fuzz_decode.h"
#include "perfx/status.h"
#include "perfx/tokenizer.h"

using namespace perfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [tok_json, cfg_json] = fuzz::split_nul(data, size);
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_hf_json(tok_json, cfg_json);
  } catch (const Error&) {
    return 0;
  }
  try {
    const int32_t vocab = tok->vocab_size();
    for (const char* s : {"Hello world", " a  b\tc\n", "caf\xC3\xA9 \xF0\x9F\xA6\x99 123", "<s>x</s>",
                          "\xFF\xFE bad"}) {
      for (bool special : {false, true}) {
        const auto ids = tok->encode(s, /*add_bos=*/special, special);
        for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < vocab, "encode id out of range");
        fuzz::check_decode(*tok, ids);
        (void)encode_prompt(*tok, s, special);
      }
    }
    std::vector<int32_t> all;
    for (int32_t id = 0; id < vocab && id < 300; ++id) {
      all.push_back(id);
      (void)tok->id_to_token(id);
      (void)tok->is_special(id);
    }
    fuzz::check_decode(*tok, all);
    (void)tok->token_to_id("Hello");
  } catch (const Error&) {
    // A tokenizer may reject text at encode time (documented for unsupported components).
  }
  return 0;
}
