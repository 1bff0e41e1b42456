// Decoder chain: each step maps the list of token strings to a new list.
#include "tokenizer/decoder.h"

#include "tokenizer/unicode.h"

namespace perfx::tok {

void Decoder::add_byte_level() {
  Step s;
  s.kind = Kind::kByteLevel;
  steps_.push_back(std::move(s));
}
void Decoder::add_replace_string(std::string from, std::string to) {
  Step s;
  s.kind = Kind::kReplaceString;
  s.a = std::move(from);
  s.b = std::move(to);
  steps_.push_back(std::move(s));
}
void Decoder::add_replace_regex(const std::string& pattern, std::string to) {
  Step s;
  s.kind = Kind::kReplaceRegex;
  s.re = std::make_shared<Regex>(pattern);
  s.b = std::move(to);
  steps_.push_back(std::move(s));
}
void Decoder::add_byte_fallback() {
  Step s;
  s.kind = Kind::kByteFallback;
  steps_.push_back(std::move(s));
}
void Decoder::add_fuse() {
  Step s;
  s.kind = Kind::kFuse;
  steps_.push_back(std::move(s));
}
void Decoder::add_strip(std::string content, size_t start, size_t stop) {
  Step s;
  s.kind = Kind::kStrip;
  s.a = std::move(content);
  s.start = start;
  s.stop = stop;
  steps_.push_back(std::move(s));
}
void Decoder::add_metaspace(std::string replacement, PrependScheme scheme) {
  Step s;
  s.kind = Kind::kMetaspace;
  s.a = std::move(replacement);
  s.scheme = scheme;
  steps_.push_back(std::move(s));
}

namespace {

std::string replace_literal(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty() || s.find(from) == std::string::npos) return s;
  std::string out;
  out.reserve(s.size());
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, prev)) {
    out.append(s, prev, pos - prev);
    out += to;
    prev = pos + from.size();
  }
  out.append(s, prev, std::string::npos);
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// <0xXX> -> byte value, else -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// Maps a token's characters back to bytes; false when a character is outside the alphabet or the
// token is not valid UTF-8 (it then stays as it is).
bool byte_level_decode(const std::string& t, std::string& out) {
  size_t pos = 0;
  while (pos < t.size()) {
    uint32_t cp;
    if (!utf8_next(t, pos, cp)) return false;
    const int b = unicode_to_byte(cp);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace

std::string Decoder::run(std::vector<std::string> tokens) const {
  if (steps_.empty()) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::kByteLevel: {
        std::string fused;
        for (const std::string& t : tokens) {
          const size_t mark = fused.size();
          if (!byte_level_decode(t, fused)) {
            fused.resize(mark);
            fused += t;
          }
        }
        tokens.assign(1, std::move(fused));
        break;
      }
      case Kind::kReplaceString:
        for (std::string& t : tokens) t = replace_literal(t, st.a, st.b);
        break;
      case Kind::kReplaceRegex:
        for (std::string& t : tokens)
          if (utf8_is_valid(t)) t = st.re->replace_all(t, st.b);
        break;
      case Kind::kByteFallback:
        for (std::string& t : tokens) {
          const int b = byte_token(t);
          if (b >= 0) t.assign(1, static_cast<char>(b));
        }
        break;
      case Kind::kFuse: {
        std::string fused;
        for (const std::string& t : tokens) fused += t;
        tokens.assign(1, std::move(fused));
        break;
      }
      case Kind::kStrip:
        for (std::string& t : tokens) {
          size_t b = 0, e = t.size();
          for (size_t k = 0; k < st.start && t.compare(b, st.a.size(), st.a) == 0 && b < e; ++k)
            b += st.a.size();
          for (size_t k = 0; k < st.stop && e >= b + st.a.size() &&
                             t.compare(e - st.a.size(), st.a.size(), st.a) == 0;
               ++k)
            e -= st.a.size();
          t = t.substr(b, e - b);
        }
        break;
      case Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = i == 0 && st.scheme != PrependScheme::kNever;
          tokens[i] = replace_literal(tokens[i], st.a, drop ? "" : " ");
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace perfx::tok
