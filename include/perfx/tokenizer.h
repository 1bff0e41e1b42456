// Text <-> token ids for Llama-family models (FORMATS.md §6): tokenizer.json BPE
// (SentencePiece-style with byte fallback, and byte-level with regex pre-tokenizers) and the
// vocabularies embedded in GGUF ("llama" SentencePiece, "gpt2" byte-level). Implementation and
// the exact list of supported components: src/tokenizer/README.md. All methods are const and
// safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace perfx {
namespace gguf {
class File;
}

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Loads dir/tokenizer.json plus dir/tokenizer_config.json (bos/eos, add_bos_token,
  /// chat_template) when present. Throws perfx::Error naming the file for a missing file or
  /// unsupported model type.
  static std::unique_ptr<Tokenizer> from_hf_dir(const std::string& dir);
  /// Same from the texts; `tokenizer_config_json` may be empty.
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& tokenizer_json,
                                                 const std::string& tokenizer_config_json);
  /// Loads the vocabulary embedded in a GGUF file (tokenizer.ggml.*; model "llama" = SentencePiece,
  /// "gpt2" = byte-level BPE with the pre-tokenizer named by tokenizer.ggml.pre).
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);

  /// Text -> ids. add_bos: prepend BOS (if the model has one). parse_special: recognise
  /// added/special token strings in the text (transformers' default).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                      bool parse_special = true) const = 0;
  /// Ids -> text through the decoder chain. Invalid UTF-8 is replaced by U+FFFD (each maximal
  /// ill-formed byte sequence becomes one U+FFFD, as Rust's from_utf8_lossy does).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;
  /// decode() before UTF-8 repair: the raw bytes of the decoder chain, where byte-fallback and
  /// byte-level tokens may leave partial characters. decode() == UTF-8-repair(decode_bytes()).
  /// The default returns decode(); StreamDecoder relies on it to never split characters.
  virtual std::string decode_bytes(const std::vector<int32_t>& ids,
                                   bool skip_special = false) const;
  /// The id of a token string (added/special tokens first, then the model vocab); -1 if absent.
  /// The default implementation returns -1.
  virtual int32_t token_to_id(std::string_view token) const;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;                // -1 when the model has none
  virtual std::vector<int32_t> eos_ids() const = 0;  // may be empty
  virtual bool add_bos_by_default() const = 0;       // what HF's encode() does
  virtual bool is_special(int32_t id) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;  // the vocab string (not decoded)
  virtual std::string bos_token() const = 0;              // text form, "" if none
  virtual std::string eos_token() const = 0;
  virtual std::string chat_template() const = 0;  // "" if none
};

/// Incremental detokenizer for streaming: push() returns the new text since the last call and never
/// returns a partial UTF-8 character (held back until complete); finish() flushes what remains.
/// The concatenation of all push() results and finish() equals tok.decode(ids, skip_special).
/// Each push() decodes only the previous and the new id (O(1) per token): the decoder chains of
/// supported tokenizers only treat the first token of a sequence specially (SentencePiece's
/// leading-space strip), and that token is the same in both decodes.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true);
  /// Feeds one id; returns the newly completed text (valid UTF-8, possibly empty).
  std::string push(int32_t id);
  /// Returns what is still held back (an incomplete character becomes U+FFFD) and resets.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  int32_t prev_ = -1;       // the last id that produced output (-1: none yet)
  std::string prev_bytes_;  // decode_bytes({prev_})
  std::string pending_;     // raw bytes not yet returned (an incomplete UTF-8 tail)
};

}  // namespace perfx
