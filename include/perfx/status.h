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

/// How an out-of-memory error for the KV cache (or another large buffer) ends: what to lower, in
/// the flags of perfx run and serve (perfx bench, whose flags are others, puts its own there).
inline constexpr char kLowerMemoryAdvice[] = "lower --kv-cache-tokens, --kv-cache-mib or -c";

/// Throws perfx::Error(msg) when cond is false. The message is built before the call: in code that
/// runs per token or per step, use PERFX_CHECK (or a literal message) so nothing is allocated when
/// the check passes.
inline void check(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}
inline void check(bool cond, const char* msg) {
  if (!cond) throw Error(msg);
}

/// check() with a lazily built message: `msg` is evaluated only when `cond` is false.
#define PERFX_CHECK(cond, msg)                       \
  do {                                               \
    if (!(cond)) throw ::perfx::Error(msg);          \
  } while (0)

}  // namespace perfx
