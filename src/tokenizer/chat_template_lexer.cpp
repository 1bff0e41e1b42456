// Chat template lexer: splits the source into text, {{ expression }} and {% statement %} segments
// ({# comments #} are dropped), tokenizes the inside of tags, and applies Jinja's whitespace
// control the way transformers configures it: "-" modifiers, trim_blocks (drop the newline after a
// block tag) and lstrip_blocks (drop spaces/tabs before a block tag at the start of a line).
#include <cctype>
#include <cstring>

#include "tokenizer/chat_template_internal.h"

namespace perfx::jinja {
namespace {

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Segment> run() {
    bool strip_leading = false;  // the previous tag ended with "-"
    bool trim_newline = false;   // the previous tag was a block/comment (trim_blocks)
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (strip_leading) {
        size_t k = 0;
        while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
        text.erase(0, k);
      } else if (trim_newline) {
        if (text.rfind("\r\n", 0) == 0) {
          text.erase(0, 2);
        } else if (!text.empty() && text[0] == '\n') {
          text.erase(0, 1);
        }
      }
      strip_leading = trim_newline = false;
      int text_line = line_;
      count_lines(pos_, tag);
      if (tag == src_.size()) {
        add_text(std::move(text), text_line);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char mod = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (mod == '-') {
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
          text.pop_back();
      } else if (mod != '+' && kind != '{' && at_line_start(tag)) {
        while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.pop_back();
      }
      add_text(std::move(text), text_line);
      pos_ = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      char end_mod = 0;
      if (kind == '#') {
        end_mod = skip_comment();
      } else {
        Segment seg;
        seg.kind = kind == '{' ? Segment::Kind::Expr : Segment::Kind::Stmt;
        seg.line = line_;
        end_mod = lex_tag(kind == '{' ? '}' : '%', seg.tokens);
        if (seg.kind == Segment::Kind::Stmt && seg.tokens.size() == 2 &&
            seg.tokens[0].kind == Token::Kind::Name && seg.tokens[0].text == "raw") {
          end_mod = lex_raw(end_mod);
          strip_leading = end_mod == '-';
          trim_newline = end_mod != '+' && end_mod != '-';
          continue;
        }
        segs_.push_back(std::move(seg));
      }
      strip_leading = end_mod == '-';
      trim_newline = kind != '{' && end_mod != '+' && end_mod != '-';
    }
    return std::move(segs_);
  }

 private:
  size_t find_tag(size_t from) const {
    while (true) {
      size_t k = src_.find('{', from);
      if (k == std::string::npos || k + 1 >= src_.size()) return src_.size();
      char c = src_[k + 1];
      if (c == '{' || c == '%' || c == '#') return k;
      from = k + 1;
    }
  }

  bool at_line_start(size_t tag) const {
    size_t k = tag;
    while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
    return k == 0 || src_[k - 1] == '\n';
  }

  void count_lines(size_t from, size_t to) {
    for (size_t k = from; k < to && k < src_.size(); ++k)
      if (src_[k] == '\n') ++line_;
  }

  void add_text(std::string text, int line) {
    if (text.empty()) return;
    Segment seg;
    seg.kind = Segment::Kind::Text;
    seg.text = std::move(text);
    seg.line = line;
    segs_.push_back(std::move(seg));
  }

  // Skips to the end of a comment; returns its end modifier ('-', '+' or 0).
  char skip_comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("unterminated comment", line_);
    char mod = (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? src_[end - 1] : 0;
    count_lines(pos_, end);
    pos_ = end + 2;
    return mod;
  }

  // Tokenizes up to the closing "}}" or "%}" (close = '}' or '%'); returns the end modifier.
  char lex_tag(char close, std::vector<Token>& out) {
    int depth = 0;  // open (, [ and { inside the tag
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) fail("unterminated tag", line_);
      char c = src_[pos_];
      if (depth == 0) {
        for (char mod : {'-', '+', '\0'}) {
          size_t k = pos_ + (mod ? 1 : 0);
          if (mod && c != mod) continue;
          if (k + 1 < src_.size() && src_[k] == close && src_[k + 1] == '}') {
            pos_ = k + 2;
            Token end;
            end.kind = Token::Kind::End;
            end.line = line_;
            out.push_back(end);
            return mod;
          }
        }
      }
      Token t;
      t.line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t k = pos_;
        while (k < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[k])) || src_[k] == '_'))
          ++k;
        t.kind = Token::Kind::Name;
        t.text = src_.substr(pos_, k - pos_);
        pos_ = k;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(t);
      } else if (c == '\'' || c == '"') {
        lex_string(t);
      } else {
        static const char* const kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        t.kind = Token::Kind::Op;
        for (const char* op : kOps2) {
          if (src_.compare(pos_, 2, op) == 0) t.text = op;
        }
        if (t.text.empty()) {
          if (!std::strchr("+-*/%~<>=()[]{},.:|", c)) {
            fail(std::string("unexpected character '") + c + "'", line_);
          }
          t.text = std::string(1, c);
        }
        pos_ += t.text.size();
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if ((t.text == ")" || t.text == "]" || t.text == "}") && depth > 0) --depth;
      }
      out.push_back(std::move(t));
    }
  }

  void lex_number(Token& t) {
    size_t k = pos_;
    while (k < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[k])) || src_[k] == '_'))
      ++k;
    bool is_float = false;
    if (k + 1 < src_.size() && src_[k] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[k + 1]))) {
      is_float = true;
      ++k;
      while (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) ++k;
    }
    if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
      size_t e = k + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        k = e;
        while (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) ++k;
      }
    }
    std::string text;
    for (size_t m = pos_; m < k; ++m)
      if (src_[m] != '_') text += src_[m];
    if (is_float) {
      t.kind = Token::Kind::Float;
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = Token::Kind::Int;
      t.i = std::strtoll(text.c_str(), nullptr, 10);
    }
    t.text = text;
    pos_ = k;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    out += from_u32(std::u32string(1, static_cast<char32_t>(cp)));
  }

  void lex_string(Token& t) {
    char q = src_[pos_++];
    t.kind = Token::Kind::String;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string literal", t.line);
      char c = src_[pos_++];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        t.text += c;
        continue;
      }
      if (pos_ >= src_.size()) fail("unterminated string literal", t.line);
      char e = src_[pos_++];
      switch (e) {
        case 'n':
          t.text += '\n';
          break;
        case 't':
          t.text += '\t';
          break;
        case 'r':
          t.text += '\r';
          break;
        case 'b':
          t.text += '\b';
          break;
        case 'f':
          t.text += '\f';
          break;
        case '0':
          t.text += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
          t.text += e;
          break;
        case '\n':  // line continuation
          ++line_;
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) fail("bad escape in string literal", t.line);
          std::string hex = src_.substr(pos_, n);
          for (char h : hex)
            if (!std::isxdigit(static_cast<unsigned char>(h)))
              fail("bad escape in string literal", t.line);
          append_utf8(t.text, static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)));
          pos_ += n;
          break;
        }
        default:  // Python keeps unknown escapes as written
          t.text += '\\';
          t.text += e;
      }
    }
  }

  // After {% raw %}: the text up to {% endraw %} is literal. Returns endraw's end modifier.
  char lex_raw(char raw_end_mod) {
    size_t search = pos_;
    while (true) {
      size_t k = src_.find("{%", search);
      if (k == std::string::npos) fail("unterminated {% raw %}", line_);
      size_t m = k + 2;
      char open_mod = 0;
      if (m < src_.size() && (src_[m] == '-' || src_[m] == '+')) open_mod = src_[m++];
      while (m < src_.size() && std::isspace(static_cast<unsigned char>(src_[m]))) ++m;
      if (src_.compare(m, 6, "endraw") != 0) {
        search = k + 2;
        continue;
      }
      m += 6;
      while (m < src_.size() && std::isspace(static_cast<unsigned char>(src_[m]))) ++m;
      char end_mod = 0;
      if (m < src_.size() && (src_[m] == '-' || src_[m] == '+')) end_mod = src_[m++];
      if (src_.compare(m, 2, "%}") != 0) fail("malformed {% endraw %}", line_);
      std::string text = src_.substr(pos_, k - pos_);
      if (raw_end_mod == '-') {
        size_t s = 0;
        while (s < text.size() && std::isspace(static_cast<unsigned char>(text[s]))) ++s;
        text.erase(0, s);
      } else if (raw_end_mod != '+' && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      if (open_mod == '-') {
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
          text.pop_back();
      } else if (open_mod != '+' && at_line_start(k)) {
        while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.pop_back();
      }
      int text_line = line_;
      count_lines(pos_, m + 2);
      add_text(std::move(text), text_line);
      pos_ = m + 2;
      return end_mod;
    }
  }

  const std::string& src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Segment> segs_;
};

}  // namespace

std::vector<Segment> lex(const std::string& source) {
  // Like Jinja (keep_trailing_newline off): one trailing newline of the source is dropped.
  std::string src = source;
  if (src.size() >= 2 && src.compare(src.size() - 2, 2, "\r\n") == 0) {
    src.resize(src.size() - 2);
  } else if (!src.empty() && src.back() == '\n') {
    src.pop_back();
  }
  return Lexer(src).run();
}

}  // namespace perfx::jinja
