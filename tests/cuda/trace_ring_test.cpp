// TraceRing (src/backend/cuda/trace_ring.h) without a GPU: unset or empty PERFX_CUDA_TRACE leaves
// it inert, and in a build without -DPERFX_CUDA_TRACE=ON asking for a trace is one clear error
// (never a silent run that writes no file).
#include "backend/cuda/trace_ring.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cuda/trace.cuh"
#include "perfx/status.h"

namespace perfx::cuda {
namespace {

struct EnvGuard {  // sets or clears PERFX_CUDA_TRACE; clears it again at scope end
  explicit EnvGuard(const char* v) {
    if (v)
      setenv("PERFX_CUDA_TRACE", v, 1);
    else
      unsetenv("PERFX_CUDA_TRACE");
  }
  ~EnvGuard() { unsetenv("PERFX_CUDA_TRACE"); }
};

TEST(TraceRing, InertWhenUnsetOrEmpty) {
  {
    EnvGuard g(nullptr);
    TraceRing r;
    EXPECT_FALSE(r.active());
  }
  {
    EnvGuard g("");
    TraceRing r;
    EXPECT_FALSE(r.active());
  }
}

TEST(TraceRing, RefusedInABuildWithoutTheTrace) {
  if (TraceRing::built()) GTEST_SKIP() << "a trace build: recording needs a GPU";
  EnvGuard g("/tmp/perfx_trace_test.csv");
  try {
    TraceRing r;
    FAIL() << "PERFX_CUDA_TRACE was accepted by a build that cannot record";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-DPERFX_CUDA_TRACE=ON"), std::string::npos) << e.what();
  }
}

TEST(TraceRing, KindNames) {
  EXPECT_STREQ(trace_kind_name(kTrGemv3), "gemv3");
  EXPECT_STREQ(trace_kind_name(kTrAttn), "attn");
  EXPECT_STREQ(trace_kind_name(kTrSample), "sample");
  EXPECT_STREQ(trace_kind_name(0), "?");
  EXPECT_STREQ(trace_kind_name(1000), "?");
}

}  // namespace
}  // namespace perfx::cuda
