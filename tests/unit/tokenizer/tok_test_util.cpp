#include "tok_test_util.h"

#include <map>
#include <mutex>
#include <sstream>

namespace perfx::test {

const Tokenizer& hf_tokenizer(const std::string& rel_dir) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[rel_dir];
  if (!slot) slot = Tokenizer::from_hf_dir(shared_path(rel_dir));
  return *slot;
}

std::vector<Vector> read_vectors(const std::string& inp_rel, const std::string& out_rel) {
  const std::vector<std::string> strs = split_vocab_tests(read_file(shared_path(inp_rel)));
  const std::string out = read_file(shared_path(out_rel));
  std::vector<std::string> lines;
  std::istringstream ss(out);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  EXPECT_GE(lines.size(), strs.size()) << out_rel << " has fewer lines than " << inp_rel;
  std::vector<Vector> v;
  for (size_t i = 0; i < strs.size() && i < lines.size(); ++i) {
    Vector x;
    x.text = strs[i];
    for (int id : parse_ints(lines[i])) x.ids.push_back(id);
    v.push_back(std::move(x));
  }
  return v;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = s[i];
    size_t n;
    unsigned cp;
    if (b < 0x80) {
      ++i;
      continue;
    }
    if (b >= 0xC2 && b <= 0xDF) {
      n = 1;
      cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 2;
      cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 3;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char c = s[i + k];
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

}  // namespace perfx::test
