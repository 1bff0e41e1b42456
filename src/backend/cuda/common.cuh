// Shared helpers of the CUDA backend: error checks that raise perfx::Error, ceil_div, and the
// device's multiprocessor count (read once per device), environment switches. Host-side only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "perfx/status.h"

namespace perfx::cuda {

/// "N MiB", rounded up.
inline std::string mib(size_t b) {
  return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB";
}

/// cudaMalloc of `bytes` (at least 256) on the current device. Out of memory throws perfx::Error
/// "out of GPU memory on cuda:<dev>: <what> needs <N> MiB, <F> MiB free of <T> MiB"; another
/// failure throws perfx::Error naming the call.
///
/// Fault injection (tests only): with PERFX_CUDA_FAULT_ALLOC_OVER=N set, a request of more than N
/// bytes fails as out of memory without calling cudaMalloc (read at each call, so a test can set
/// and unset it around the step it wants to fail; docs/RELIABILITY.md, "Fault injection").
inline void* device_malloc(size_t bytes, const std::string& what) {
  void* p = nullptr;
  const char* over = std::getenv("PERFX_CUDA_FAULT_ALLOC_OVER");
  const cudaError_t e = over && *over && bytes > std::strtoull(over, nullptr, 10)
                            ? cudaErrorMemoryAllocation
                            : cudaMalloc(&p, bytes < 256 ? 256 : bytes);
  if (e == cudaSuccess) return p;
  (void)cudaGetLastError();
  if (e == cudaErrorMemoryAllocation) {
    int dev = -1;
    size_t free_b = 0, total_b = 0;
    (void)cudaGetDevice(&dev);
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw Error("out of GPU memory on cuda:" + std::to_string(dev) + ": " + what + " needs " +
                mib(bytes) + ", " + mib(free_b) + " free of " + mib(total_b));
  }
  throw Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
              ") in cudaMalloc for " + what);
}

/// cudaFree of `p` (device memory, or null) with the GPU that owns it current for the call, then
/// the caller's again: a thread that has not used that GPU (a server's scheduler thread freeing a
/// buffer) would otherwise first make GPU 0's context current on it. Never throws; an error
/// surfaces at the next checked call.
inline void device_free(void* p) noexcept {
  if (p == nullptr) return;
  cudaPointerAttributes a{};
  int cur = -1;
  const bool other = cudaPointerGetAttributes(&a, p) == cudaSuccess &&
                     cudaGetDevice(&cur) == cudaSuccess && a.device >= 0 && a.device != cur;
  if (other) (void)cudaSetDevice(a.device);
  (void)cudaFree(p);
  if (other) (void)cudaSetDevice(cur);
}

/// Throws perfx::Error "CUDA error <name> (<text>) at <file>:<line>: <what>".
[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file,
                                          int line) {
  throw Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
              ") at " + file + ":" + std::to_string(line) + ": " + what);
}

/// Checks a CUDA runtime call; throws perfx::Error naming the call on failure.
#define CUDA_CHECK(call)                                                           \
  do {                                                                             \
    const cudaError_t perfx_cuda_err_ = (call);                                    \
    if (perfx_cuda_err_ != cudaSuccess)                                            \
      ::perfx::cuda::throw_cuda_error(perfx_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch just made (configuration errors are reported by cudaGetLastError; faults
/// inside the kernel surface at the next synchronizing call). Legal during stream capture.
#define CUDA_CHECK_LAUNCH(what)                                                   \
  do {                                                                            \
    const cudaError_t perfx_cuda_err_ = cudaGetLastError();                       \
    if (perfx_cuda_err_ != cudaSuccess)                                           \
      ::perfx::cuda::throw_cuda_error(perfx_cuda_err_, what, __FILE__, __LINE__); \
  } while (0)

/// Whether environment variable `name` is set to exactly `value` (the backend's switches are read
/// once per process into statics by their users).
inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, value) == 0;
}

/// Environment variable `name` as a whole number in [lo, hi]; `fallback` when unset or empty.
/// Throws (PERFX_CHECK, naming the variable and the range) on anything else. Callers read it once.
inline int env_int(const char* name, int lo, int hi, int fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  const std::string v = e;
  const bool digits = v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos;
  const long n = digits ? std::stol(v) : -1;
  PERFX_CHECK(digits && n >= lo && n <= hi, std::string(name) + " must be a whole number from " +
                                                std::to_string(lo) + " to " + std::to_string(hi) +
                                                ", got '" + v + "'");
  return static_cast<int>(n);
}

template <typename I>
constexpr I ceil_div(I a, I b) {
  return (a + b - 1) / b;
}

/// Multiprocessor count of the current device, read once per device (up to 16 devices) with
/// cudaDeviceGetAttribute, which is legal during stream capture.
inline int device_sm_count() {
  static std::atomic<int> cached[16] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 16) dev = 0;
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (n <= 0) n = 1;
    cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace perfx::cuda
