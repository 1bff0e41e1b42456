// Loader for Hugging Face tokenizer.json (+ tokenizer_config.json): maps each JSON component to
// the pipeline parts. Supported: model BPE; normalizers NFC, NFD, Lowercase, Prepend, Replace,
// Strip, ByteLevel, Sequence; pre-tokenizers Split, ByteLevel, Metaspace, Digits, Whitespace,
// WhitespaceSplit, Punctuation, BertPreTokenizer, Sequence; decoders ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, Sequence; post-processors TemplateProcessing, ByteLevel,
// RobertaProcessing, BertProcessing, Sequence (only used to find the BOS id). Anything else is a
// perfx::Error naming the component.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/mmap.h"
#include "formats/gguf.h"
#include "perfx/status.h"
#include "perfx/tokenizer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pipeline.h"

namespace perfx {
namespace {

using nlohmann::json;
using tok::PipelineTokenizer;

// Where the JSON came from, for error messages.
struct Ctx {
  std::string src;
  [[noreturn]] void fail(const std::string& what) const { throw Error(src + ": " + what); }
};

std::string str_or(const json& j, const char* key, const std::string& def) {
  auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : def;
}
bool bool_or(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : def;
}
size_t uint_or(const json& j, const char* key, size_t def) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number_unsigned()) ? it->get<size_t>() : def;
}

// A token id: an integer in int32 range, else an error naming `what`. (get<int32_t>() on a float
// such as 1.8e19 is an out-of-range float-to-int conversion, UB: found by fuzz_tokenizer_json.)
int32_t token_id(const Ctx& c, const json& v, const std::string& what) {
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    const int64_t i = v.get<int64_t>();
    if (i >= INT32_MIN && i <= INT32_MAX) return static_cast<int32_t>(i);
  } else if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= (uint64_t)INT32_MAX) return static_cast<int32_t>(u);
  }
  c.fail(what + " must be an integer token id (got " + v.dump().substr(0, 40) + ")");
}

// {"String": s} or {"Regex": r}: returns the text and whether it is a regex.
std::pair<std::string, bool> read_pattern(const Ctx& c, const json& j, const std::string& what) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) c.fail(what + " has no pattern object");
  if (it->contains("Regex")) return {(*it)["Regex"].get<std::string>(), true};
  if (it->contains("String")) return {(*it)["String"].get<std::string>(), false};
  c.fail(what + " pattern is neither String nor Regex");
}

tok::SplitBehavior read_behavior(const Ctx& c, const json& j, tok::SplitBehavior def) {
  const std::string b = str_or(j, "behavior", "");
  if (b.empty()) return def;
  if (b == "Removed") return tok::SplitBehavior::kRemoved;
  if (b == "Isolated") return tok::SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return tok::SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return tok::SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return tok::SplitBehavior::kContiguous;
  c.fail("unknown split behavior '" + b + "'");
}

tok::PrependScheme read_scheme(const Ctx& c, const json& j) {
  auto it = j.find("prepend_scheme");
  if (it != j.end() && it->is_string()) {
    const std::string s = it->get<std::string>();
    if (s == "always") return tok::PrependScheme::kAlways;
    if (s == "first") return tok::PrependScheme::kFirst;
    if (s == "never") return tok::PrependScheme::kNever;
    c.fail("unknown Metaspace prepend_scheme '" + s + "'");
  }
  // Older files: add_prefix_space (default true).
  return bool_or(j, "add_prefix_space", true) ? tok::PrependScheme::kAlways
                                              : tok::PrependScheme::kNever;
}

std::string type_of(const Ctx& c, const json& j, const std::string& what) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    c.fail(what + " has no \"type\"");
  return j["type"].get<std::string>();
}

void add_normalizer(const Ctx& c, const json& j, tok::Normalizer& n) {
  if (j.is_null()) return;
  const std::string t = type_of(c, j, "normalizer");
  if (t == "Sequence") {
    for (const json& k : j.at("normalizers")) add_normalizer(c, k, n);
  } else if (t == "NFC") {
    n.add_nfc();
  } else if (t == "NFD") {
    n.add_nfd();
  } else if (t == "Lowercase") {
    n.add_lowercase();
  } else if (t == "Prepend") {
    n.add_prepend(j.at("prepend").get<std::string>());
  } else if (t == "Replace") {
    auto [pat, regex] = read_pattern(c, j, "Replace normalizer");
    if (regex)
      n.add_replace_regex(pat, j.at("content").get<std::string>());
    else
      n.add_replace_string(pat, j.at("content").get<std::string>());
  } else if (t == "Strip") {
    n.add_strip(bool_or(j, "strip_left", true), bool_or(j, "strip_right", true));
  } else if (t == "ByteLevel") {
    n.add_byte_level();
  } else {
    c.fail("unsupported normalizer type '" + t +
           "' (supported: NFC, NFD, Lowercase, Prepend, Replace, Strip, ByteLevel, Sequence)");
  }
}

void add_pretokenizer(const Ctx& c, const json& j, tok::PreTokenizer& p) {
  if (j.is_null()) return;
  const std::string t = type_of(c, j, "pre_tokenizer");
  if (t == "Sequence") {
    for (const json& k : j.at("pretokenizers")) add_pretokenizer(c, k, p);
  } else if (t == "Split") {
    auto [pat, regex] = read_pattern(c, j, "Split pre-tokenizer");
    p.add_split(std::make_shared<const tok::Regex>(pat, !regex),
                read_behavior(c, j, tok::SplitBehavior::kIsolated), bool_or(j, "invert", false));
  } else if (t == "ByteLevel") {
    p.add_byte_level(bool_or(j, "add_prefix_space", true), bool_or(j, "use_regex", true));
  } else if (t == "Metaspace") {
    p.add_metaspace(str_or(j, "replacement", "\xE2\x96\x81"), read_scheme(c, j),
                    bool_or(j, "split", true));
  } else if (t == "Digits") {
    p.add_digits(bool_or(j, "individual_digits", false));
  } else if (t == "Whitespace") {
    p.add_whitespace();
  } else if (t == "WhitespaceSplit") {
    p.add_whitespace_split();
  } else if (t == "Punctuation") {
    p.add_punctuation(read_behavior(c, j, tok::SplitBehavior::kIsolated));
  } else if (t == "BertPreTokenizer") {
    p.add_whitespace_split();
    p.add_punctuation(tok::SplitBehavior::kIsolated);
  } else {
    c.fail("unsupported pre_tokenizer type '" + t +
           "' (supported: Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, "
           "Punctuation, BertPreTokenizer, Sequence)");
  }
}

void add_decoder(const Ctx& c, const json& j, tok::Decoder& d) {
  if (j.is_null()) return;
  const std::string t = type_of(c, j, "decoder");
  if (t == "Sequence") {
    for (const json& k : j.at("decoders")) add_decoder(c, k, d);
  } else if (t == "ByteLevel") {
    d.add_byte_level();
  } else if (t == "Replace") {
    auto [pat, regex] = read_pattern(c, j, "Replace decoder");
    if (regex)
      d.add_replace_regex(pat, j.at("content").get<std::string>());
    else
      d.add_replace_string(pat, j.at("content").get<std::string>());
  } else if (t == "ByteFallback") {
    d.add_byte_fallback();
  } else if (t == "Fuse") {
    d.add_fuse();
  } else if (t == "Strip") {
    // start > 1 after Fuse strips across tokens (the text " " + " a" loses both spaces), and
    // stop > 0 strips the end of every two-token window, not only the end of the text: neither
    // can StreamDecoder's two-token decode reproduce (fuzz_tokenizer_json found the streamed text
    // differing from decode()). Real tokenizers strip one leading space (start 1, stop 0).
    const size_t start = uint_or(j, "start", 0), stop = uint_or(j, "stop", 0);
    if (start > 1 || stop > 0)
      c.fail("unsupported Strip decoder with start " + std::to_string(start) + ", stop " +
             std::to_string(stop) + " (supported: start 0 or 1, stop 0; streamed text would " +
             "differ from decode())");
    // HF's Strip content is one character (a Rust char); a longer string made StreamDecoder's
    // text differ from decode() (fuzz_tokenizer_json in CI, content "  ").
    const std::string content = str_or(j, "content", " ");
    size_t chars = 0;
    for (unsigned char ch : content) chars += (ch & 0xC0) != 0x80;
    if (chars != 1)
      c.fail("Strip decoder content must be one character, got '" + content + "'");
    d.add_strip(content, start, stop);
  } else if (t == "Metaspace") {
    d.add_metaspace(str_or(j, "replacement", "\xE2\x96\x81"), read_scheme(c, j));
  } else {
    c.fail("unsupported decoder type '" + t +
           "' (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)");
  }
}

// The BOS the post-processor puts in front of a single sequence, if any: token text and id.
bool find_template_bos(const Ctx& c, const json& j, std::string& text, int32_t& id) {
  if (j.is_null()) return false;
  const std::string t = type_of(c, j, "post_processor");
  if (t == "Sequence") {
    for (const json& k : j.at("processors"))
      if (find_template_bos(c, k, text, id)) return true;
    return false;
  }
  if (t == "TemplateProcessing") {
    const json& single = j.at("single");
    if (!single.is_array() || single.empty() || !single[0].contains("SpecialToken")) return false;
    text = single[0]["SpecialToken"].at("id").get<std::string>();
    const json& specials = j.value("special_tokens", json::object());
    auto it = specials.find(text);
    if (it != specials.end() && it->contains("ids") && !(*it)["ids"].empty())
      id = token_id(c, (*it)["ids"][0], "post_processor special_tokens ids");
    return true;
  }
  if (t == "RobertaProcessing" || t == "BertProcessing") {
    const json& cls = j.at("cls");
    text = cls.at(0).get<std::string>();
    id = token_id(c, cls.at(1), "post_processor cls id");
    return true;
  }
  return false;  // ByteLevel and others add nothing in front
}

// bos_token / eos_token in tokenizer_config.json: a string, an AddedToken dict, or null.
bool config_token(const json& cfg, const char* key, std::string& out) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return false;
  if (it->is_string()) {
    out = it->get<std::string>();
    return true;
  }
  if (it->is_object() && it->contains("content")) {
    out = (*it)["content"].get<std::string>();
    return true;
  }
  return false;
}

json parse_json(const Ctx& c, const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    c.fail(std::string("malformed JSON: ") + e.what());
  }
}

// tokenizer.json parsed with a SAX handler: model.vocab and model.merges (hundreds of thousands
// of entries in Llama-3/Qwen) go straight into compact tables; the rest becomes a small DOM.
struct ParsedTokenizer {
  json doc;
  std::shared_ptr<tok::Vocab> vocab = std::make_shared<tok::Vocab>();
  bool has_vocab = false;
  std::vector<std::string> merges;  // a0, b0, a1, b1, ... for [a, b] rules
  std::vector<std::string> legacy;  // "a b" rules
  bool has_merges = false;
  std::string bad_entry;  // first vocab/merge entry of an unexpected shape
};

class TokenizerSax : public nlohmann::json_sax<json> {
 public:
  explicit TokenizerSax(ParsedTokenizer& p) : p_(p) {}

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == kVocab && depth_ == mode_depth_) return vocab_id(v);
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == kVocab && depth_ == mode_depth_) return vocab_id(static_cast<int64_t>(v));
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t&) override { return value(json()); }
  bool string(string_t& v) override {
    if (mode_ == kMerges) {
      if (depth_ == mode_depth_) {
        p_.legacy.push_back(std::move(v));
      } else if (depth_ == mode_depth_ + 1) {
        p_.merges.push_back(std::move(v));
        ++pair_len_;
      } else {
        bad("merge rule");
      }
      return true;
    }
    if (mode_ == kVocab) return bad("vocab entry '" + key_ + "'");
    return value(json(std::move(v)));
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (mode_ != kDom) {
      ++depth_;
      return bad("entry in model." + std::string(mode_ == kVocab ? "vocab" : "merges"));
    }
    // Intercept {"model": {"vocab": {...}}}.
    if (depth_ == 2 && path_is_model() && key_ == "vocab") {
      ++depth_;
      mode_ = kVocab;
      mode_depth_ = depth_;
      p_.has_vocab = true;
      return true;
    }
    return open(json::object());
  }
  bool end_object() override {
    if (mode_ != kDom) {
      if (depth_-- == mode_depth_) mode_ = kDom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == kMerges) {
      ++depth_;
      pair_len_ = 0;
      return true;
    }
    if (mode_ == kVocab) {
      ++depth_;
      return bad("vocab entry '" + key_ + "'");
    }
    if (depth_ == 2 && path_is_model() && key_ == "merges") {
      ++depth_;
      mode_ = kMerges;
      mode_depth_ = depth_;
      p_.has_merges = true;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == kMerges) {
      if (depth_ == mode_depth_ + 1 && pair_len_ != 2) bad("merge rule");
      if (depth_-- == mode_depth_) mode_ = kDom;
      return true;
    }
    if (mode_ == kVocab) {
      --depth_;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t pos, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error_ = std::string(e.what()) + " (byte " + std::to_string(pos) + ")";
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  enum Mode { kDom, kVocab, kMerges };

  bool path_is_model() const {
    return stack_.size() == 2 && keys_.size() == 2 && keys_[1] == "model";
  }
  bool bad(const std::string& what) {
    if (p_.bad_entry.empty()) p_.bad_entry = what;
    return true;
  }
  bool vocab_id(int64_t id) {
    if (id < 0 || id > INT32_MAX) return bad("vocab entry '" + key_ + "'");
    p_.vocab->set(static_cast<int32_t>(id), key_);
    return true;
  }
  // Adds a scalar to the current container (or makes it the document).
  bool value(json v) {
    if (stack_.empty()) {
      p_.doc = std::move(v);
    } else if (stack_.back()->is_object()) {
      (*stack_.back())[key_] = std::move(v);
    } else {
      stack_.back()->push_back(std::move(v));
    }
    return true;
  }
  bool open(json v) {
    json* child;
    if (stack_.empty()) {
      p_.doc = std::move(v);
      child = &p_.doc;
    } else if (stack_.back()->is_object()) {
      child = &((*stack_.back())[key_] = std::move(v));
    } else {
      stack_.back()->push_back(std::move(v));
      child = &stack_.back()->back();
    }
    keys_.push_back(stack_.empty() ? std::string() : key_);
    stack_.push_back(child);
    ++depth_;
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    --depth_;
    return true;
  }

  ParsedTokenizer& p_;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // the key each open container was stored under
  std::string key_;
  Mode mode_ = kDom;
  int depth_ = 0, mode_depth_ = 0;
  int pair_len_ = 0;
  std::string error_;
};

ParsedTokenizer parse_tokenizer_json(const Ctx& c, const std::string& text) {
  ParsedTokenizer p;
  TokenizerSax sax(p);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &sax);
  } catch (const json::exception& e) {
    c.fail(std::string("malformed JSON: ") + e.what());
  }
  if (!ok) c.fail("malformed JSON: " + sax.error());
  return p;
}

void load_bpe_model(const Ctx& c, ParsedTokenizer& p, const json& m, PipelineTokenizer& t) {
  if (!p.has_vocab) c.fail("model.vocab is missing or not an object");
  if (!p.bad_entry.empty()) c.fail("unexpected " + p.bad_entry + " in the BPE model");
  auto v = p.vocab;
  tok::BpeModel::Options o;
  const std::string unk = str_or(m, "unk_token", "");
  if (!unk.empty()) o.unk_id = v->find(unk);
  o.fuse_unk = bool_or(m, "fuse_unk", false);
  o.byte_fallback = bool_or(m, "byte_fallback", false);
  o.ignore_merges = bool_or(m, "ignore_merges", false);
  o.continuing_subword_prefix = str_or(m, "continuing_subword_prefix", "");
  o.end_of_word_suffix = str_or(m, "end_of_word_suffix", "");
  auto bpe = std::make_unique<tok::BpeModel>(v, o);
  if (!p.legacy.empty() && !p.merges.empty()) c.fail("model.merges mixes \"a b\" and [a, b] rules");
  bpe->reserve_merges(p.legacy.size() + p.merges.size() / 2);
  for (const std::string& r : p.legacy) {
    // Legacy form "a b": the parts are separated by the one space (tokens have no spaces).
    const size_t sp = r.find(' ');
    if (sp == std::string::npos || r.find(' ', sp + 1) != std::string::npos)
      c.fail("merge rule '" + r + "' is not of the form \"a b\"");
    bpe->add_merge(std::string_view(r).substr(0, sp), std::string_view(r).substr(sp + 1));
  }
  for (size_t i = 0; i + 1 < p.merges.size(); i += 2) bpe->add_merge(p.merges[i], p.merges[i + 1]);
  // The rule strings are no longer needed.
  std::vector<std::string>().swap(p.legacy);
  std::vector<std::string>().swap(p.merges);
  t.vocab = std::move(v);
  t.model = std::move(bpe);
}

std::unique_ptr<Tokenizer> load_hf(const Ctx& c, const std::string& tokenizer_json, const Ctx& cc,
                                   const std::string& config_json,
                                   const std::string& extra_template) {
  ParsedTokenizer parsed = parse_tokenizer_json(c, tokenizer_json);
  const json& j = parsed.doc;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    c.fail("no \"model\" object (is this a tokenizer.json?)");
  const json& m = j["model"];
  std::string type = str_or(m, "type", "");
  if (type.empty()) {
    // Files written by old versions of tokenizers omit the type; BPE is the one with merges.
    if (parsed.has_merges)
      type = "BPE";
    else
      c.fail("model has no \"type\" and no merges (only BPE models are supported)");
  }
  if (type != "BPE")
    c.fail("unsupported tokenizer model type '" + type + "' (only BPE is supported)");

  auto t = std::make_unique<PipelineTokenizer>();
  try {
    load_bpe_model(c, parsed, m, *t);
    if (j.contains("added_tokens")) {
      for (const json& a : j["added_tokens"]) {
        tok::AddedToken at;
        at.id = token_id(c, a.at("id"), "added_tokens id");
        at.content = a.at("content").get<std::string>();
        at.special = bool_or(a, "special", false);
        at.lstrip = bool_or(a, "lstrip", false);
        at.rstrip = bool_or(a, "rstrip", false);
        at.single_word = bool_or(a, "single_word", false);
        at.normalized = bool_or(a, "normalized", !at.special);
        t->added.push_back(std::move(at));
      }
    }
    add_normalizer(c, j.value("normalizer", json()), t->normalizer);
    add_pretokenizer(c, j.value("pre_tokenizer", json()), t->pretokenizer);
    add_decoder(c, j.value("decoder", json()), t->decoder);
    std::string bos_text;
    int32_t bos_id = -1;
    const bool template_bos =
        find_template_bos(c, j.value("post_processor", json()), bos_text, bos_id);
    t->add_bos_default = template_bos;

    json cfg = json::object();
    if (!config_json.empty()) cfg = parse_json(cc, config_json);
    if (!cfg.is_object()) cc.fail("not a JSON object");
    // Tokens known only from the config's added_tokens_decoder.
    if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object()) {
      for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end();
           ++it) {
        const int32_t id = std::stoi(it.key());
        bool known = false;
        for (const tok::AddedToken& a : t->added) known = known || a.id == id;
        if (known || !it.value().contains("content")) continue;
        tok::AddedToken at;
        at.id = id;
        at.content = it.value()["content"].get<std::string>();
        at.special = bool_or(it.value(), "special", false);
        at.lstrip = bool_or(it.value(), "lstrip", false);
        at.rstrip = bool_or(it.value(), "rstrip", false);
        at.single_word = bool_or(it.value(), "single_word", false);
        at.normalized = bool_or(it.value(), "normalized", !at.special);
        t->added.push_back(std::move(at));
      }
    }
    t->finalize();
    // The post-processor's template puts its BOS id in front of every prompt encoded with special
    // tokens (tokenizer_config.json's bos_token and add_bos_token do not change the template's
    // ids): an id outside the vocabulary is a broken file, not a BOS to drop.
    if (template_bos && bos_id != -1 && (bos_id < 0 || bos_id >= t->vocab_size()))
      c.fail("post_processor BOS id " + std::to_string(bos_id) + " ('" + bos_text +
             "') is not a token id (the vocabulary has " + std::to_string(t->vocab_size()) +
             " tokens)");

    std::string text;
    if (cfg.contains("bos_token")) {
      // The config is authoritative, including an explicit null (Qwen: no BOS).
      t->bos = config_token(cfg, "bos_token", text) ? t->token_to_id(text) : -1;
    } else if (template_bos) {
      t->bos = bos_id >= 0 ? bos_id : t->token_to_id(bos_text);
    }
    if (config_token(cfg, "eos_token", text)) {
      const int32_t id = t->token_to_id(text);
      if (id >= 0) t->eos = {id};
    }
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      t->add_bos_default = cfg["add_bos_token"].get<bool>();

    auto ct = cfg.find("chat_template");
    if (ct != cfg.end() && ct->is_string()) {
      t->template_text = ct->get<std::string>();
    } else if (ct != cfg.end() && ct->is_array()) {
      // A list of {name, template}: the "default" one, else the first.
      for (const json& e : *ct) {
        if (e.is_object() && e.value("name", "") == "default") {
          t->template_text = e.value("template", "");
          break;
        }
      }
      if (t->template_text.empty() && !ct->empty() && (*ct)[0].is_object())
        t->template_text = (*ct)[0].value("template", "");
    }
    if (t->template_text.empty()) t->template_text = extra_template;
  } catch (const json::exception& e) {
    c.fail(std::string("unexpected JSON structure: ") + e.what());
  }
  return t;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& tokenizer_json,
                                                   const std::string& tokenizer_config_json) {
  return load_hf({"tokenizer.json"}, tokenizer_json, {"tokenizer_config.json"},
                 tokenizer_config_json, "");
}

std::unique_ptr<Tokenizer> Tokenizer::from_hf_dir(const std::string& dir) {
  const std::string tj = dir + "/tokenizer.json";
  if (!is_directory(dir)) throw Error("tokenizer: directory '" + dir + "' not found");
  // `perfx quantize` of a GGUF model keeps the GGUF's tokenizer this way.
  const std::string tg = dir + "/tokenizer.gguf";
  if (!path_exists(tj) && path_exists(tg)) return from_gguf(*gguf::File::open(tg));
  if (!path_exists(tj))
    throw Error("tokenizer: '" + tj +
                "' not found (only tokenizer.json is supported, not "
                "SentencePiece tokenizer.model)");
  const std::string cj = dir + "/tokenizer_config.json";
  const std::string cfg = path_exists(cj) ? read_text_file(cj) : std::string();
  // Newer repos ship the chat template as a separate file.
  const std::string jinja = dir + "/chat_template.jinja";
  const std::string extra = path_exists(jinja) ? read_text_file(jinja) : std::string();
  return load_hf({tj}, read_text_file(tj), {cj}, cfg, extra);
}

}  // namespace perfx
