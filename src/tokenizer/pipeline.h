// The one Tokenizer implementation: added tokens -> normalizer -> pre-tokenizer -> model, and
// ids -> token strings -> decoder chain. The loaders (hf_tokenizer.cpp, gguf_vocab.cpp) fill in
// the parts and call finalize().
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "perfx/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

namespace perfx::tok {

class PipelineTokenizer final : public Tokenizer {
 public:
  // ---- parts, set by the loaders ----
  std::shared_ptr<Vocab> vocab;  // the model's vocabulary
  std::unique_ptr<Model> model;
  std::vector<AddedToken> added;  // matched before the model; may repeat vocab ids
  Normalizer normalizer;
  PreTokenizer pretokenizer;
  Decoder decoder;
  int32_t bos = -1;
  std::vector<int32_t> eos;
  bool add_bos_default = false;
  std::string template_text;
  /// Extra ids that count as special besides special added tokens (GGUF control tokens).
  std::vector<int32_t> extra_special;

  /// Builds the id table, the special flags and the added-token matchers. Call once after the
  /// parts are set.
  void finalize();

  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
  std::string decode_bytes(const std::vector<int32_t>& ids,
                           bool skip_special = false) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_text_.size()); }
  int32_t bos_id() const override { return bos; }
  std::vector<int32_t> eos_ids() const override { return eos; }
  bool add_bos_by_default() const override { return add_bos_default && bos >= 0; }
  bool is_special(int32_t id) const override {
    return id >= 0 && id < static_cast<int32_t>(special_.size()) && special_[id];
  }
  std::string id_to_token(int32_t id) const override {
    return (id >= 0 && id < vocab_size()) ? id_text_[id] : std::string();
  }
  int32_t token_to_id(std::string_view text) const override;
  std::string bos_token() const override { return id_to_token(bos); }
  std::string eos_token() const override {
    return eos.empty() ? std::string() : id_to_token(eos[0]);
  }
  std::string chat_template() const override { return template_text; }

 private:
  void encode_text(std::string_view piece, bool at_start, bool parse_special,
                   std::vector<int32_t>& ids) const;
  void encode_normalized(std::string text, bool at_start, std::vector<int32_t>& ids) const;

  std::vector<std::string> id_text_;
  std::vector<bool> special_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_ids_;
  AddedTokenMatcher raw_matcher_, norm_matcher_;
};

}  // namespace perfx::tok
