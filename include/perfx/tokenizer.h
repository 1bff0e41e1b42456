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
  /// chat_template) when present; a folder without tokenizer.json but with tokenizer.gguf (what
  /// `perfx quantize` writes for a GGUF model) loads that with from_gguf. Throws perfx::Error
  /// naming the file for a missing file or unsupported model type, and for a post-processor BOS
  /// id outside the vocabulary.
  static std::unique_ptr<Tokenizer> from_hf_dir(const std::string& dir);
  /// Same from the texts; `tokenizer_config_json` may be empty.
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& tokenizer_json,
                                                 const std::string& tokenizer_config_json);
  /// Loads the vocabulary embedded in a GGUF file (tokenizer.ggml.*; model "llama" = SentencePiece,
  /// "gpt2" = byte-level BPE with the pre-tokenizer named by tokenizer.ggml.pre). Throws
  /// perfx::Error naming the file for a missing or unsupported tokenizer and for a
  /// tokenizer.ggml.bos_token_id outside the vocabulary (-1 or an id >= 2^31, such as 0xFFFFFFFF,
  /// means "no BOS").
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);

  /// Text -> ids. add_bos: prepend BOS (if the model has one). parse_special: recognise
  /// added/special token strings in the text (transformers' default).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                      bool parse_special = true) const = 0;
  /// Ids -> text through the decoder chain. Invalid UTF-8 is replaced by U+FFFD (each maximal
  /// ill-formed byte sequence becomes one U+FFFD, as Rust's from_utf8_lossy does). Ids outside
  /// [0, vocab_size()) and ids without a token string (id_to_token() == "": holes in the id
  /// space) are ignored, as Hugging Face ignores ids missing from the vocabulary.
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
///
/// The text of the pushed ids is their exact contribution after `context` (the prompt): HF's
/// decode(context + ids) minus decode(context), as vLLM's incremental detokenizer. A decoder's
/// start-of-text rule (SentencePiece's leading-space strip, Metaspace) therefore applies only when
/// the context decodes to nothing: "Once upon a time," + [▁there] gives " there", while [▁Once]
/// after the BOS alone gives "Once". Without a context, the concatenation of all push() results
/// and finish() equals tok.decode(ids, skip_special).
/// Each push() decodes only the previous and the new id (O(1) per token): the decoder chains of
/// supported tokenizers only treat the first token of a sequence specially, and that token is the
/// same in both decodes.
class StreamDecoder {
 public:
  /// `context`: ids already decoded (e.g. the prompt); its text is not returned. Ids that decode()
  /// drops (outside the vocabulary, without a token string, or special when skip_special) are
  /// ignored there too.
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true,
                         const std::vector<int32_t>& context = {});
  /// Feeds one id; returns the newly completed text (valid UTF-8, possibly empty).
  std::string push(int32_t id);
  /// The raw bytes the last push() added to the text: that id's exact contribution, possibly an
  /// incomplete UTF-8 character (a byte-fallback token's one byte); "" for an id decode() drops.
  const std::string& last_bytes() const { return last_bytes_; }
  /// What push(id) would add and return now, without feeding it.
  struct Piece {
    std::string bytes;  // as last_bytes() would be
    std::string text;   // as push() would return
  };
  Piece peek(int32_t id) const;
  /// Returns what is still held back (an incomplete character becomes U+FFFD) and resets (the
  /// next push() starts a new text, without context).
  std::string finish();

 private:
  bool dropped(int32_t id) const;
  std::string added_bytes(int32_t id) const;  // id's contribution after prev_

  const Tokenizer& tok_;
  bool skip_special_;
  int32_t prev_ = -1;       // the last id that produced output (-1: none yet)
  std::string prev_bytes_;  // decode_bytes({prev_})
  std::string pending_;     // raw bytes not yet returned (an incomplete UTF-8 tail)
  std::string last_bytes_;  // what the last push() added
};

/// Prompt text -> the ids the model is fed; the one rule for BOS, used by every path (perfx run,
/// tokenize and --dump-logits, the server's completions, chat and /tokenize).
/// With add_special, BOS is prepended when the tokenizer adds it by default
/// (add_bos_by_default(): tokenizer_config.json add_bos_token, else the tokenizer.json
/// post-processor; GGUF tokenizer.ggml.add_bos_token). A prompt text that itself starts with the
/// BOS text then gives a double BOS, kept as Hugging Face keeps it; `double_bos` (if given) is set
/// so the caller can warn. from_template: the text is a rendered chat template, which usually
/// writes the BOS itself; BOS is then prepended only when the text does not start with it. Special
/// tokens in the text are recognised. An empty text with add_special gives the BOS alone when the
/// model has one, even one it does not add by default ("start from BOS"), else no ids.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text,
                                   bool add_special = true, bool from_template = false,
                                   bool* double_bos = nullptr);

/// The one warning line for a double BOS (encode_prompt's double_bos), without a prefix:
/// "the prompt starts with the BOS text '<s>' and the tokenizer adds BOS too: the model sees two".
std::string double_bos_warning(const Tokenizer& tok);

}  // namespace perfx
