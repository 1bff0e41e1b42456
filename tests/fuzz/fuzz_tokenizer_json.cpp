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
#include "perfx/status.h"
#include "perfx/tokenizer.h"

using namespace perfx;

namespace {

void check_decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (bool skip : {false, true}) {
    const std::string text = tok.decode(ids, skip);
    FUZZ_ASSERT(fuzz::is_valid_utf8(text), "decode() returned invalid UTF-8");
    StreamDecoder sd(tok, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.finish();
    if (streamed != text) {
      std::fprintf(stderr, "ids:");
      for (int32_t id : ids) std::fprintf(stderr, " %d", id);
      std::fprintf(stderr, "\nskip_special %d\ndecode:   '%s'\nstreamed: '%s'\n", (int)skip,
                   text.c_str(), streamed.c_str());
    }
    FUZZ_ASSERT(streamed == text, "StreamDecoder pieces != decode()");
  }
}

}  // namespace

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
        check_decode(*tok, ids);
        (void)encode_prompt(*tok, s, special);
      }
    }
    std::vector<int32_t> all;
    for (int32_t id = 0; id < vocab && id < 300; ++id) {
      all.push_back(id);
      (void)tok->id_to_token(id);
      (void)tok->is_special(id);
    }
    check_decode(*tok, all);
    (void)tok->token_to_id("Hello");
  } catch (const Error&) {
    // A tokenizer may reject text at encode time (documented for unsupported components).
  }
  return 0;
}
