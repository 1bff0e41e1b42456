// StreamDecoder: per token, decode (previous id, new id) and keep what the new id added; emit the
// longest complete UTF-8 prefix of the pending bytes. Also encode_prompt, the one BOS rule.
#include "perfx/tokenizer.h"
#include "tokenizer/unicode.h"

namespace perfx {

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
  return decode(ids, skip_special);
}

int32_t Tokenizer::token_to_id(std::string_view) const {
  return -1;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special,
                             const std::vector<int32_t>& context)
    : tok_(tok), skip_special_(skip_special) {
  // Only the context's last kept id matters: it is the first token of the next two-token decode.
  for (auto it = context.rbegin(); it != context.rend(); ++it) {
    if (dropped(*it)) continue;
    prev_ = *it;
    prev_bytes_ = tok_.decode_bytes({prev_}, skip_special_);
    break;
  }
}

bool StreamDecoder::dropped(int32_t id) const {
  // Ids that decode() drops contribute nothing and must not become the context token.
  return id < 0 || id >= tok_.vocab_size() || (skip_special_ && tok_.is_special(id)) ||
         tok_.id_to_token(id).empty();  // a hole in the id space (no token string)
}

std::string StreamDecoder::added_bytes(int32_t id) const {
  std::string own = tok_.decode_bytes({id}, skip_special_);
  if (prev_ < 0) return own;
  // The previous id is the first token of this two-token decode, exactly as it was (alone) in
  // prev_bytes_, so whatever the chain does to a first token cancels out.
  std::string both = tok_.decode_bytes({prev_, id}, skip_special_);
  if (both.compare(0, prev_bytes_.size(), prev_bytes_) == 0) return both.substr(prev_bytes_.size());
  // Not prefix-stable (a chain that rewrites the end of a token): best effort.
  return both.size() > prev_bytes_.size() ? both.substr(prev_bytes_.size()) : std::string();
}

StreamDecoder::Piece StreamDecoder::peek(int32_t id) const {
  Piece p;
  if (dropped(id)) return p;
  p.bytes = added_bytes(id);
  tok::utf8_lossy_append(pending_ + p.bytes, /*final=*/false, p.text);
  return p;
}

std::string StreamDecoder::push(int32_t id) {
  last_bytes_.clear();
  if (dropped(id)) return {};
  last_bytes_ = added_bytes(id);
  prev_ = id;
  prev_bytes_ = tok_.decode_bytes({id}, skip_special_);
  pending_ += last_bytes_;
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
  last_bytes_.clear();
  return out;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, bool add_special,
                                   bool from_template, bool* double_bos) {
  if (double_bos) *double_bos = false;
  const int32_t bos = tok.bos_id();
  if (text.empty())
    return add_special && bos >= 0 ? std::vector<int32_t>{bos} : std::vector<int32_t>{};
  const std::string bos_text = bos >= 0 ? tok.bos_token() : std::string();
  const bool starts_with_bos = !bos_text.empty() && text.substr(0, bos_text.size()) == bos_text;
  bool add_bos = add_special && bos >= 0 && tok.add_bos_by_default();
  if (from_template && starts_with_bos) add_bos = false;
  std::vector<int32_t> ids = tok.encode(text, add_bos, /*parse_special=*/true);
  if (double_bos) *double_bos = add_bos && ids.size() >= 2 && ids[0] == bos && ids[1] == bos;
  return ids;
}

std::string double_bos_warning(const Tokenizer& tok) {
  return "the prompt starts with the BOS text '" + tok.bos_token() +
         "' and the tokenizer adds BOS too: the model sees two (as in Hugging Face); drop one of "
         "them if that is not intended";
}

}  // namespace perfx
