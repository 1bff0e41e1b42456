// Errors raised by PerfXLLM. Every failure the user can cause (a bad file, a bad flag, a bad request)
// is reported as perfx::Error with one line that names the file/field/value at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace perfx {

/// The one exception type of the library. what() is a single human-readable line.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Throws perfx::Error(msg) when cond is false.
inline void check(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

}  // namespace perfx
