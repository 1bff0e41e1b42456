// Byte trie over the added tokens' contents; leftmost-longest scan.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cstdint>

#include "tokenizer/unicode.h"

namespace perfx::tok {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& nx = nodes_[node].next;
  auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(b, INT32_MIN));
  return (it != nx.end() && it->first == b) ? it->second : -1;
}

void AddedTokenMatcher::add(const AddedToken& t) {
  if (t.content.empty()) return;
  first_byte_[static_cast<uint8_t>(t.content[0])] = true;
  int32_t node = 0;
  for (char c : t.content) {
    const uint8_t b = static_cast<uint8_t>(c);
    int32_t nx = child(node, b);
    if (nx < 0) {
      nx = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& v = nodes_[node].next;
      v.insert(std::lower_bound(v.begin(), v.end(), std::make_pair(b, INT32_MIN)), {b, nx});
    }
    node = nx;
  }
  if (nodes_[node].token >= 0) return;  // same content twice: the first wins
  nodes_[node].token = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(t);
}

namespace {

// The code point that ends just before byte offset `pos` (pos > 0).
uint32_t char_before(std::string_view s, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  return utf8_next_valid(s, start);
}

// Word characters for single_word: ASCII alphanumerics and '_', and any non-ASCII non-space
// character (an approximation of Unicode alphanumerics).
bool is_word_char(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  return !is_unicode_whitespace(cp);
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<Segment>& out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  size_t text_begin = 0;  // start of the pending text segment
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;  // a continuation byte never starts a token, so byte steps are safe here
      continue;
    }
    // Walk the trie from pos, remembering every acceptable match (longest last).
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const int32_t t = nodes_[node].token;
      if (t < 0) continue;
      const AddedToken& tok = tokens_[t];
      if (tok.special && !parse_special) continue;
      if (tok.single_word) {
        if (pos > 0 && is_word_char(char_before(text, pos))) continue;
        size_t p = i + 1;
        if (p < text.size() && is_word_char(utf8_next_valid(text, p))) continue;
      }
      best = t;
      best_end = i + 1;
    }
    if (best < 0) {
      pos += utf8_char_len(static_cast<uint8_t>(text[pos]));
      continue;
    }
    const AddedToken& tok = tokens_[best];
    size_t mb = pos, me = best_end;
    if (tok.lstrip) {
      while (mb > text_begin) {
        size_t start = mb - 1;
        while (start > text_begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        size_t p = start;
        if (!is_unicode_whitespace(utf8_next_valid(text, p))) break;
        mb = start;
      }
    }
    if (tok.rstrip) {
      while (me < text.size()) {
        size_t p = me;
        if (!is_unicode_whitespace(utf8_next_valid(text, p))) break;
        me = p;
      }
    }
    if (mb > text_begin) out.push_back({text_begin, mb, -1});
    out.push_back({mb, me, tok.id});
    text_begin = pos = me;
  }
  if (text_begin < text.size()) out.push_back({text_begin, text.size(), -1});
}

}  // namespace perfx::tok
