#include "support/test_support.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace perfx::test {

ScopedEnv::ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars) {
  for (const auto& [name, value] : vars) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    ::setenv(name, value.c_str(), 1);
  }
}

ScopedEnv::~ScopedEnv() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second)
      ::setenv(it->first.c_str(), it->second->c_str(), 1);
    else
      ::unsetenv(it->first.c_str());
  }
}

std::string shared_dir() {
  const char* env = std::getenv("PERFX_SHARED_DIR");
  if (env && *env) return env;
  return PERFX_DEFAULT_SHARED_DIR;
}

std::string shared_path(const std::string& rel) {
  return shared_dir() + "/" + rel;
}
std::string source_dir() {
  return PERFX_SOURCE_DIR;
}

bool path_exists_for_test(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

bool fixtures_required() {
  const char* e = std::getenv("PERFX_REQUIRE_FIXTURES");
  return e && std::string(e) == "1";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_vocab_tests(const std::string& text) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t next = text.find(sep, pos);
    if (next == std::string::npos) {
      std::string last = text.substr(pos);
      if (!last.empty()) out.push_back(last);
      break;
    }
    out.push_back(text.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<int> parse_ints(const std::string& line) {
  std::vector<int> v;
  std::istringstream ss(line);
  long x;
  while (ss >> x) v.push_back((int)x);
  return v;
}

std::string device_param_name(const std::string& device) {
  std::string n = device;
  for (char& c : n)
    if (!std::isalnum((unsigned char)c)) c = '_';
  return n;
}

std::vector<std::string> env_test_devices() {
  std::vector<std::string> d;
  const char* e = std::getenv("PERFX_TEST_DEVICE");
  if (!e) return d;
  const std::string s = e;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t c = s.find(',', p);
    const std::string one = s.substr(p, c == std::string::npos ? std::string::npos : c - p);
    if (!one.empty() && std::find(d.begin(), d.end(), one) == d.end()) d.push_back(one);
    if (c == std::string::npos) break;
    p = c + 1;
  }
  return d;
}

}  // namespace perfx::test
