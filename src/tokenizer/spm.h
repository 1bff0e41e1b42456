// Score-based BPE as SentencePiece's BPE model and llama.cpp's "llama" vocab run it: repeatedly
// merge the adjacent pair whose concatenation is a vocab piece with the highest score (leftmost on
// ties); characters missing from the vocab become <0xXX> byte pieces, else unk.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace perfx::tok {

class SpmModel : public Model {
 public:
  /// `scores[id]` is the piece score; `unk_id` -1 when there is none.
  SpmModel(std::shared_ptr<const Vocab> vocab, std::vector<float> scores, int32_t unk_id);

  void encode_word(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  std::shared_ptr<const Vocab> vocab_;
  std::vector<float> scores_;
  int32_t unk_id_;
  int32_t byte_ids_[256];
};

}  // namespace perfx::tok
