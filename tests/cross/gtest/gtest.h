// A minimal stand-in for GoogleTest, for the cross-compiled kernel tests (tests/cross/run_aarch64.sh):
// the aarch64 toolchain has no arm64 googletest, and the kernel tests use only this subset
// (TEST, EXPECT_/ASSERT_ EQ NE LE LT GE GT NEAR TRUE FALSE with << messages, GTEST_SKIP). Each
// TEST registers itself; main() (cross_main.cpp) runs them all and prints "N passed, N failed".
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace testing {

struct TestCase {
  const char* suite;
  const char* name;
  std::function<void()> fn;
};
inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> r;
  return r;
}
inline int& failures() {  // failed checks of the running test
  static int f = 0;
  return f;
}
struct Registrar {
  Registrar(const char* s, const char* n, std::function<void()> f) {
    registry().push_back({s, n, std::move(f)});
  }
};
/// Collects the streamed message of a failed check and prints it when destroyed.
class Failure {
 public:
  Failure(const char* file, int line, const std::string& what) {
    ++failures();
    ss_ << file << ":" << line << ": failure: " << what;
  }
  ~Failure() { std::fprintf(stderr, "%s\n", ss_.str().c_str()); }
  template <class T>
  Failure& operator<<(const T& v) {
    ss_ << " " << v;
    return *this;
  }

 private:
  std::ostringstream ss_;
};
struct Skip {
  template <class T>
  Skip& operator<<(const T&) {
    return *this;
  }
};
/// Makes `return Failure(...) << ...;` legal in a void function.
struct Voidify {
  void operator&(const Failure&) {}
  void operator&(const Skip&) {}
};

}  // namespace testing

#define TEST(suite, name)                                                                   \
  static void suite##_##name##_body();                                                      \
  static ::testing::Registrar suite##_##name##_reg(#suite, #name, suite##_##name##_body);   \
  static void suite##_##name##_body()

#define PERFX_SHIM_CHECK(cond, what, fatal)                                                  \
  if (cond) {                                                                                \
  } else                                                                                     \
    fatal ::testing::Voidify() & ::testing::Failure(__FILE__, __LINE__, what)

#define PERFX_SHIM_RETURN return
#define PERFX_SHIM_NORETURN
#define EXPECT_TRUE(c) PERFX_SHIM_CHECK((c), #c, PERFX_SHIM_NORETURN)
#define EXPECT_FALSE(c) PERFX_SHIM_CHECK(!(c), "!(" #c ")", PERFX_SHIM_NORETURN)
#define ASSERT_TRUE(c) PERFX_SHIM_CHECK((c), #c, PERFX_SHIM_RETURN)
#define ASSERT_FALSE(c) PERFX_SHIM_CHECK(!(c), "!(" #c ")", PERFX_SHIM_RETURN)
#define PERFX_SHIM_CMP(a, op, b, fatal) PERFX_SHIM_CHECK(((a)op(b)), #a " " #op " " #b, fatal)
#define EXPECT_EQ(a, b) PERFX_SHIM_CMP(a, ==, b, PERFX_SHIM_NORETURN)
#define EXPECT_NE(a, b) PERFX_SHIM_CMP(a, !=, b, PERFX_SHIM_NORETURN)
#define EXPECT_LE(a, b) PERFX_SHIM_CMP(a, <=, b, PERFX_SHIM_NORETURN)
#define EXPECT_LT(a, b) PERFX_SHIM_CMP(a, <, b, PERFX_SHIM_NORETURN)
#define EXPECT_GE(a, b) PERFX_SHIM_CMP(a, >=, b, PERFX_SHIM_NORETURN)
#define EXPECT_GT(a, b) PERFX_SHIM_CMP(a, >, b, PERFX_SHIM_NORETURN)
#define ASSERT_EQ(a, b) PERFX_SHIM_CMP(a, ==, b, PERFX_SHIM_RETURN)
#define ASSERT_NE(a, b) PERFX_SHIM_CMP(a, !=, b, PERFX_SHIM_RETURN)
#define ASSERT_LE(a, b) PERFX_SHIM_CMP(a, <=, b, PERFX_SHIM_RETURN)
#define ASSERT_LT(a, b) PERFX_SHIM_CMP(a, <, b, PERFX_SHIM_RETURN)
#define ASSERT_GE(a, b) PERFX_SHIM_CMP(a, >=, b, PERFX_SHIM_RETURN)
#define ASSERT_GT(a, b) PERFX_SHIM_CMP(a, >, b, PERFX_SHIM_RETURN)
#define EXPECT_NEAR(a, b, t) \
  PERFX_SHIM_CHECK(std::fabs((double)(a) - (double)(b)) <= (t), #a " ~ " #b, PERFX_SHIM_NORETURN)
#define ASSERT_NEAR(a, b, t) \
  PERFX_SHIM_CHECK(std::fabs((double)(a) - (double)(b)) <= (t), #a " ~ " #b, PERFX_SHIM_RETURN)
#define GTEST_SKIP() return ::testing::Voidify() & ::testing::Skip()
