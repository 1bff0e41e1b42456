// The decode invariants both tokenizer fuzz targets assert (tests/fuzz/README.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "perfx/tokenizer.h"

namespace perfx::fuzz {

/// For skip_special false and true: decode(ids) is valid UTF-8, and StreamDecoder's pieces, pushed
/// one id at a time, concatenate to exactly decode(ids) (prints both and aborts otherwise).
inline void check_decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (bool skip : {false, true}) {
    const std::string text = tok.decode(ids, skip);
    FUZZ_ASSERT(is_valid_utf8(text), "decode() returned invalid UTF-8");
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

}  // namespace perfx::fuzz
