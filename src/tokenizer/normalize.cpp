// Normalizer chain: each step rewrites the whole piece.
#include "tokenizer/normalize.h"

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_norm.h"

namespace perfx::tok {

Normalizer::Step Normalizer::make(Kind kind, std::string a, std::string b) {
  Step s;
  s.kind = kind;
  s.a = std::move(a);
  s.b = std::move(b);
  return s;
}

void Normalizer::add_nfc() {
  steps_.push_back(make(Kind::kNFC));
}
void Normalizer::add_nfd() {
  steps_.push_back(make(Kind::kNFD));
}
void Normalizer::add_lowercase() {
  steps_.push_back(make(Kind::kLower));
}
void Normalizer::add_prepend(std::string text) {
  steps_.push_back(make(Kind::kPrepend, std::move(text)));
}
void Normalizer::add_replace_string(std::string from, std::string to) {
  steps_.push_back(make(Kind::kReplaceString, std::move(from), std::move(to)));
}
void Normalizer::add_replace_regex(const std::string& pattern, std::string to) {
  Step s = make(Kind::kReplaceRegex, {}, std::move(to));
  s.re = std::make_shared<Regex>(pattern);
  steps_.push_back(std::move(s));
}
void Normalizer::add_strip(bool left, bool right) {
  Step s = make(Kind::kStrip);
  s.left = left;
  s.right = right;
  steps_.push_back(std::move(s));
}
void Normalizer::add_byte_level() {
  steps_.push_back(make(Kind::kByteLevel));
}

namespace {

std::string replace_literal(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != std::string_view::npos; pos = s.find(from, prev)) {
    out.append(s.substr(prev, pos - prev));
    out.append(to);
    prev = pos + from.size();
  }
  out.append(s.substr(prev));
  return out;
}

std::string strip_ws(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t p = b;
      if (!is_unicode_whitespace(utf8_next_valid(s, p))) break;
      b = p;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
      size_t p = start;
      if (!is_unicode_whitespace(utf8_next_valid(s, p))) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::kNFC:
        cur = to_nfc(cur);
        break;
      case Kind::kNFD:
        cur = to_nfd(cur);
        break;
      case Kind::kLower:
        cur = to_lower(cur);
        break;
      case Kind::kPrepend:
        if (!cur.empty()) cur.insert(0, st.a);
        break;
      case Kind::kReplaceString:
        cur = replace_literal(cur, st.a, st.b);
        break;
      case Kind::kReplaceRegex:
        cur = st.re->replace_all(cur, st.b);
        break;
      case Kind::kStrip:
        cur = strip_ws(cur, st.left, st.right);
        break;
      case Kind::kByteLevel: {
        std::string out;
        out.reserve(cur.size() * 2);
        for (char c : cur) out += byte_to_unicode(static_cast<uint8_t>(c));
        cur = std::move(out);
        break;
      }
    }
  }
  return cur;
}

}  // namespace perfx::tok
