// Helpers shared by the tests: where the shared fixtures live, and skipping when they are absent.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace perfx::test {

/// $PERFX_SHARED_DIR, else the folder configured at build time (default ../shared beside the repo).
std::string shared_dir();
/// shared_dir() + "/" + rel.
std::string shared_path(const std::string& rel);
/// The repository root.
std::string source_dir();
/// Reads a text file (throws on failure).
std::string read_file(const std::string& path);
/// Splits llama.cpp-style vector files: strings separated by "\n__ggml_vocab_test__\n".
std::vector<std::string> split_vocab_tests(const std::string& text);
/// Parses whitespace-separated integers.
std::vector<int> parse_ints(const std::string& line);
/// n samples of N(0, 1) from mt19937(seed): the random, non-zero inputs kernel tests use.
inline std::vector<float> random_normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// Sets environment variables for the life of the object, then puts back what was there (the old
/// value, or unset). Backends read their switches when created or at each use, child processes
/// when started: the variable must outlive what reads it. Not thread-safe (setenv).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv({{name, value}}) {}
  ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace perfx::test

/// Skips the current test with a clear message when the shared fixture `rel` is missing.
/// With PERFX_REQUIRE_FIXTURES=1 (CI) a missing fixture fails the test instead.
#define PERFX_REQUIRE_SHARED(rel)                                                     \
  do {                                                                                \
    if (!::perfx::test::path_exists_for_test(::perfx::test::shared_path(rel))) {      \
      if (::perfx::test::fixtures_required())                                         \
        GTEST_FAIL() << "shared fixture missing: " << ::perfx::test::shared_path(rel) \
                     << " (PERFX_REQUIRE_FIXTURES=1)";                                \
      GTEST_SKIP() << "shared fixture missing: " << ::perfx::test::shared_path(rel)   \
                   << " (set PERFX_SHARED_DIR)";                                      \
    }                                                                                 \
  } while (0)

namespace perfx::test {
bool path_exists_for_test(const std::string& p);
/// True when the environment sets PERFX_REQUIRE_FIXTURES=1.
bool fixtures_required();

/// Devices named in the environment variable PERFX_TEST_DEVICE (comma-separated, e.g.
/// "cuda:0,opencl"), in order, without duplicates; empty when unset.
std::vector<std::string> env_test_devices();

/// True when create_backend(device) succeeds here; otherwise false with the reason in *why (a test
/// skips then: no GPU, not compiled in). Errors after creation must fail the test, not skip it.
bool device_available(const std::string& device, std::string* why);

/// A device name as a googletest parameter name: every character that is not a letter or a digit
/// becomes '_' ("cuda:0" -> "cuda_0", "f16-ref" -> "f16_ref").
std::string device_param_name(const std::string& device);
/// The name generator of a suite instantiated over device names:
/// INSTANTIATE_TEST_SUITE_P(Devices, Suite, ValuesIn(devices), DeviceParamName()). (A template,
/// so that tests/cross's minimal googletest stand-in, which has no TestParamInfo, still compiles
/// this header.)
struct DeviceParamName {
  template <typename Info>
  std::string operator()(const Info& info) const {
    return device_param_name(info.param);
  }
};
}  // namespace perfx::test
