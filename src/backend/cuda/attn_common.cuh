// Shared host-side pieces of the CUDA attention / RoPE kernels: the activation dtype tag and an
// error-checking macro. Plain C++ (includable from .cpp files compiled by the host compiler).
// The CUDA backend's general helpers live in common.cuh (owned elsewhere); this header uses its own
// names (ATTN_CUDA_CHECK, perfx::cuda::AttnDtype) so both can be included together.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace perfx::cuda {

/// Element type of activations (q, out, k, v) and of the KV cache. Softmax and accumulation are
/// always fp32.
enum class AttnDtype : int { kF16 = 0, kBF16 = 1 };

/// A q8_0 KV cache (--cache-type-k/-v q8_0) keeps one fp16 scale per 32 values of a head; the
/// scales of one (slot, KV head) form a record of this many halves (8 bytes up to head_dim 128,
/// 16 up to 256), so that a tile kernel stages a key's scales with one cp.async.
__host__ __device__ constexpr int q8_scale_stride(int head_dim) {
  return head_dim <= 128 ? 4 : 8;
}

namespace attn_detail {

/// Throws std::runtime_error naming the failed CUDA call, its error string and the source line.
[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* expr, const char* file,
                                          int line) {
  throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ") in `" + expr + "` at " + file + ":" +
                           std::to_string(line));
}

/// Throws std::invalid_argument(what) unless cond holds (host-side precondition checks).
inline void require(bool cond, const std::string& what) {
  if (!cond) throw std::invalid_argument(what);
}

}  // namespace attn_detail
}  // namespace perfx::cuda

/// Checks a cudaError_t-returning expression; throws std::runtime_error on failure.
#define ATTN_CUDA_CHECK(expr)                                                             \
  do {                                                                                    \
    const cudaError_t attn_err_ = (expr);                                                 \
    if (attn_err_ != cudaSuccess)                                                         \
      ::perfx::cuda::attn_detail::throw_cuda_error(attn_err_, #expr, __FILE__, __LINE__); \
  } while (0)
