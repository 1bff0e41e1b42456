// PCRE2 wrapper: compile once (with JIT), match from many threads with per-call match data.
#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "perfx/status.h"
#include "tokenizer/unicode.h"

namespace perfx::tok {

namespace {
pcre2_code* as_code(void* p) {
  return static_cast<pcre2_code*>(p);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
}  // namespace

Regex::Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // PCRE2_LITERAL does not combine with PCRE2_UCP (and needs no character properties).
  const uint32_t opts = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   opts, &err, &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw Error("tokenizer: cannot compile regex '" + pattern + "': " +
                reinterpret_cast<const char*>(msg) + " at offset " + std::to_string(err_off));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  pcre2_code_free(as_code(code_));
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (text.empty()) return;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    // The text was validated once by the caller, so PCRE2 need not check it again per call.
    const int rc = jit_ ? pcre2_jit_match(as_code(code_), subject, text.size(), start,
                                          PCRE2_NO_UTF_CHECK, md.get(), nullptr)
                        : pcre2_match(as_code(code_), subject, text.size(), start,
                                      PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw Error("tokenizer: regex match failed for '" + pattern_ +
                  "': " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {
      // Empty match: step over one character.
      if (b >= text.size()) break;
      start = b + utf8_char_len(static_cast<uint8_t>(text[b]));
    }
  }
}

std::string Regex::replace_all(std::string_view text, std::string_view with) const {
  std::vector<std::pair<size_t, size_t>> m;
  find_all(text, m);
  if (m.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (auto [b, e] : m) {
    out.append(text.substr(prev, b - prev));
    out.append(with);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace perfx::tok
