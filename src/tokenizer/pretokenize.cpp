// Pre-tokenizer chain: every step maps the current list of pieces to a new list.
#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace perfx::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

struct Seg {
  size_t b, e;
  bool match;
};

std::shared_ptr<const Regex> gpt2_regex() {
  static const auto re = std::make_shared<const Regex>(kGpt2Pattern);
  return re;
}

}  // namespace

void split_by_regex(const Regex& re, SplitBehavior behavior, bool invert, const PreToken& piece,
                    std::vector<PreToken>& out) {
  const std::string& text = piece.text;
  if (text.empty()) return;
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(text, m);
  // Interleave gaps and matches; `invert` swaps which of them count as delimiters.
  std::vector<Seg> segs;
  segs.reserve(m.size() * 2 + 1);
  size_t prev = 0;
  for (auto [b, e] : m) {
    if (b > prev) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) segs.push_back({prev, text.size(), invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back({text.substr(b, e - b), piece.at_start && b == 0});
  };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Seg& s : segs)
        if (!s.match) emit(s.b, s.e);
      return;
    case SplitBehavior::kIsolated:
      for (const Seg& s : segs) emit(s.b, s.e);
      return;
    case SplitBehavior::kMergedWithPrevious: {
      // A delimiter joins the piece before it (unless that piece is a delimiter too).
      size_t cur_b = 0, cur_e = 0;
      bool have = false, prev_match = false;
      for (const Seg& s : segs) {
        if (s.match && !prev_match && have) {
          cur_e = s.e;
        } else {
          if (have) emit(cur_b, cur_e);
          cur_b = s.b;
          cur_e = s.e;
          have = true;
        }
        prev_match = s.match;
      }
      if (have) emit(cur_b, cur_e);
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      // A delimiter joins the piece after it (unless that piece is a delimiter too): walk
      // backwards and collect the pieces in reverse.
      std::vector<std::pair<size_t, size_t>> rev;
      bool next_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        const Seg& s = segs[i];
        if (s.match && !next_match && !rev.empty())
          rev.back().first = s.b;
        else
          rev.emplace_back(s.b, s.e);
        next_match = s.match;
      }
      for (size_t i = rev.size(); i-- > 0;) emit(rev[i].first, rev[i].second);
      return;
    }
    case SplitBehavior::kContiguous: {
      // Runs of adjacent delimiters become one piece.
      size_t cur_b = 0, cur_e = 0;
      bool have = false, prev_match = false;
      for (const Seg& s : segs) {
        if (s.match == prev_match && have) {
          cur_e = s.e;
        } else {
          if (have) emit(cur_b, cur_e);
          cur_b = s.b;
          cur_e = s.e;
          have = true;
        }
        prev_match = s.match;
      }
      if (have) emit(cur_b, cur_e);
      return;
    }
  }
}

void PreTokenizer::add_split(std::shared_ptr<const Regex> re, SplitBehavior behavior, bool invert) {
  Step s;
  s.kind = Kind::kSplit;
  s.re = std::move(re);
  s.behavior = behavior;
  s.invert = invert;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  Step s;
  s.kind = Kind::kByteLevel;
  s.add_prefix_space = add_prefix_space;
  if (use_regex) s.re = gpt2_regex();
  steps_.push_back(std::move(s));
  byte_level_ = true;
}

void PreTokenizer::add_metaspace(std::string replacement, PrependScheme scheme, bool split) {
  Step s;
  s.kind = Kind::kMetaspace;
  s.re = std::make_shared<const Regex>(replacement, /*literal=*/true);
  s.replacement = std::move(replacement);
  s.scheme = scheme;
  s.split = split;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_digits(bool individual) {
  add_split(std::make_shared<const Regex>(individual ? R"(\p{N})" : R"(\p{N}+)"),
            SplitBehavior::kIsolated, false);
}

void PreTokenizer::add_whitespace() {
  add_split(std::make_shared<const Regex>(R"(\w+|[^\w\s]+)"), SplitBehavior::kRemoved, true);
}

void PreTokenizer::add_whitespace_split() {
  add_split(std::make_shared<const Regex>(R"(\s)"), SplitBehavior::kRemoved, false);
}

void PreTokenizer::add_punctuation(SplitBehavior behavior) {
  add_split(std::make_shared<const Regex>(R"([\p{P}!-/:-@\[-`{-~])"), behavior, false);
}

namespace {

std::string replace_all(const std::string& s, char from, const std::string& to) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    if (c == from)
      out += to;
    else
      out.push_back(c);
  }
  return out;
}

}  // namespace

void PreTokenizer::run(std::string text, bool at_start, std::vector<PreToken>& out) const {
  if (text.empty()) return;
  std::vector<PreToken> cur, next;
  cur.push_back({std::move(text), at_start});
  for (const Step& st : steps_) {
    next.clear();
    for (PreToken& p : cur) {
      switch (st.kind) {
        case Kind::kSplit:
          split_by_regex(*st.re, st.behavior, st.invert, p, next);
          break;
        case Kind::kByteLevel: {
          if (st.add_prefix_space && p.text.front() != ' ') p.text.insert(0, 1, ' ');
          size_t first = next.size();
          if (st.re)
            split_by_regex(*st.re, SplitBehavior::kIsolated, false, p, next);
          else
            next.push_back(std::move(p));
          for (size_t i = first; i < next.size(); ++i) {
            std::string mapped;
            mapped.reserve(next[i].text.size() * 2);
            for (char c : next[i].text) mapped += byte_to_unicode(static_cast<uint8_t>(c));
            next[i].text = std::move(mapped);
          }
          break;
        }
        case Kind::kMetaspace: {
          std::string t = replace_all(p.text, ' ', st.replacement);
          const bool starts = t.compare(0, st.replacement.size(), st.replacement) == 0;
          if (!starts && (st.scheme == PrependScheme::kAlways ||
                          (st.scheme == PrependScheme::kFirst && p.at_start)))
            t.insert(0, st.replacement);
          PreToken q{std::move(t), p.at_start};
          if (st.split)
            split_by_regex(*st.re, SplitBehavior::kMergedWithNext, false, q, next);
          else
            next.push_back(std::move(q));
          break;
        }
      }
    }
    cur.swap(next);
  }
  for (PreToken& p : cur)
    if (!p.text.empty()) out.push_back(std::move(p));
}

}  // namespace perfx::tok
