// "cpu-exact": the CPU backend with int8 activations off (what PERFX_ACT_QUANT=off selects), so
// every weight runs on the exact fp32-activation kernels whatever the environment says. The parity
// tests against transformers use it; "cpu" (int8 activations for int4 / Q8_0 weights) is checked
// against it with the int8 path's stated tolerance.
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

namespace perfx::test {
namespace {

/// Registered when the test binary starts (this file is linked into it directly).
const bool kRegistered = [] {
  register_backend("cpu-exact",
                   [](int, int n_threads) { return cpu::create_cpu_backend(n_threads, false); });
  return true;
}();

}  // namespace
}  // namespace perfx::test
