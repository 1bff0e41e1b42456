// StreamDecoder: per token, decode (previous id, new id) and keep what the new id added; emit the
// longest complete UTF-8 prefix of the pending bytes.
#include "perfx/tokenizer.h"
#include "tokenizer/unicode.h"

namespace perfx {

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
  return decode(ids, skip_special);
}

int32_t Tokenizer::token_to_id(std::string_view) const {
  return -1;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  // Ids that decode() drops contribute nothing and must not become the context token.
  if (id < 0 || id >= tok_.vocab_size()) return {};
  if (skip_special_ && tok_.is_special(id)) return {};
  std::string added;
  std::string own = tok_.decode_bytes({id}, skip_special_);
  if (prev_ < 0) {
    added = own;
  } else {
    // The previous id is the first token of this two-token decode, exactly as it was (alone) in
    // prev_bytes_, so whatever the chain does to a first token cancels out.
    std::string both = tok_.decode_bytes({prev_, id}, skip_special_);
    if (both.compare(0, prev_bytes_.size(), prev_bytes_) == 0) {
      added = both.substr(prev_bytes_.size());
    } else {
      // Not prefix-stable (a chain that rewrites the end of a token): best effort.
      added = both.size() > prev_bytes_.size() ? both.substr(prev_bytes_.size()) : std::string();
    }
  }
  prev_ = id;
  prev_bytes_ = std::move(own);
  pending_ += added;
  std::string out;
  const size_t used = tok::utf8_lossy_append(pending_, /*final=*/false, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  tok::utf8_lossy_append(pending_, /*final=*/true, out);
  pending_.clear();
  prev_ = -1;
  prev_bytes_.clear();
  return out;
}

}  // namespace perfx
