// Encode/decode through the configured parts.
#include "tokenizer/pipeline.h"

#include "perfx/status.h"
#include "tokenizer/unicode.h"

namespace perfx::tok {

void PipelineTokenizer::finalize() {
  int32_t n = vocab ? vocab->size() : 0;
  for (const AddedToken& t : added) {
    if (t.id > kMaxTokenId)
      throw Error("tokenizer: added token id " + std::to_string(t.id) + " is too large (at most " +
                  std::to_string(kMaxTokenId) + ")");
    n = std::max(n, t.id + 1);
  }
  id_text_.assign(n, std::string());
  special_.assign(n, false);
  if (vocab)
    for (int32_t i = 0; i < vocab->size(); ++i) id_text_[i] = std::string(vocab->text(i));
  for (const AddedToken& t : added) {
    if (t.id < 0) continue;
    id_text_[t.id] = t.content;
    if (t.special) special_[t.id] = true;
    added_ids_.emplace(t.content, t.id);
    if (t.normalized && !normalizer.empty()) {
      // Like HF, a normalized token is looked for in its normalized form.
      AddedToken n = t;
      n.content = normalizer.apply(t.content);
      norm_matcher_.add(n);
    } else {
      (t.normalized ? norm_matcher_ : raw_matcher_).add(t);
    }
  }
  for (int32_t id : extra_special)
    if (id >= 0 && id < n) special_[id] = true;
}

int32_t PipelineTokenizer::token_to_id(std::string_view text) const {
  auto it = added_ids_.find(text);
  if (it != added_ids_.end()) return it->second;
  return vocab ? vocab->find(text) : -1;
}

std::vector<int32_t> PipelineTokenizer::encode(std::string_view text, bool add_bos,
                                               bool parse_special) const {
  std::string fixed;
  if (!utf8_is_valid(text)) {
    fixed = utf8_lossy(text);
    text = fixed;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && bos >= 0) ids.push_back(bos);
  std::vector<Segment> segs;
  raw_matcher_.split(text, parse_special, segs);
  for (const Segment& s : segs) {
    if (s.id >= 0)
      ids.push_back(s.id);
    else
      encode_text(text.substr(s.begin, s.end - s.begin), s.begin == 0, parse_special, ids);
  }
  return ids;
}

void PipelineTokenizer::encode_text(std::string_view piece, bool at_start, bool parse_special,
                                    std::vector<int32_t>& ids) const {
  std::string norm = normalizer.empty() ? std::string(piece) : normalizer.apply(piece);
  if (norm_matcher_.empty()) {
    encode_normalized(std::move(norm), at_start, ids);
    return;
  }
  std::vector<Segment> segs;
  norm_matcher_.split(norm, parse_special, segs);
  for (const Segment& s : segs) {
    if (s.id >= 0)
      ids.push_back(s.id);
    else
      encode_normalized(norm.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, ids);
  }
}

void PipelineTokenizer::encode_normalized(std::string text, bool at_start,
                                          std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  if (pretokenizer.empty()) {
    model->encode_word(text, ids);
    return;
  }
  std::vector<PreToken> words;
  pretokenizer.run(std::move(text), at_start, words);
  for (const PreToken& w : words) model->encode_word(w.text, ids);
}

std::string PipelineTokenizer::decode_bytes(const std::vector<int32_t>& ids,
                                            bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;  // unknown ids are ignored, as HF does
    // So is an id with no token: a hole in the id space (a vocab that skips ids, added tokens
    // past its end). It used to enter the decoder chain as "" and, first in StreamDecoder's
    // two-token decode, made the next token look like the start of the text (found by
    // tests/fuzz/fuzz_tokenizer_json: Strip dropped that token's space).
    if (id_text_[id].empty()) continue;
    if (skip_special && special_[id]) continue;
    tokens.push_back(id_text_[id]);
  }
  return decoder.run(std::move(tokens));
}

std::string PipelineTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return utf8_lossy(decode_bytes(ids, skip_special));
}

}  // namespace perfx::tok
