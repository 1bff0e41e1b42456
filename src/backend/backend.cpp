#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "perfx/status.h"

namespace perfx {

Tensor Tensor::cols_view(int64_t c0, int64_t n) const {
  check(c0 >= 0 && c0 + n <= cols, "Tensor::cols_view out of range");
  Tensor t = *this;
  t.data = static_cast<char*>(data) + c0 * (int64_t)dtype_block_bytes(dtype);
  t.cols = n;
  return t;
}

Tensor Tensor::rows_view(int64_t r0, int64_t n) const {
  check(r0 >= 0 && r0 + n <= rows, "Tensor::rows_view out of range");
  Tensor t = *this;
  t.data = static_cast<char*>(data) + r0 * stride * (int64_t)dtype_block_bytes(dtype);
  t.rows = n;
  return t;
}

std::unique_ptr<Backend> create_backend(const std::string& device, int n_threads) {
  if (device == "cpu") return cpu::create_cpu_backend(n_threads);
  if (device == "cuda" || device == "opencl")
    throw Error("device '" + device + "' is not compiled into this build (available: cpu)");
  throw Error("unknown device '" + device + "' (available: cpu)");
}

}  // namespace perfx
