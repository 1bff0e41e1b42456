// Internal to the linear kernels: shared argument checks, dtype dispatch and launch (host).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/dtype.h"
#include "perfx/status.h"

namespace perfx::cuda {

/// The common preconditions of linear.cuh ("Common preconditions"). Messages are built only on
/// failure (PERFX_CHECK), so the check costs a few compares per launch.
inline void check_linear_args(const char* op, int64_t N, int64_t K, const void* x, DType xt, int M,
                              int64_t ldx, const void* y, DType yt, int64_t ldy) {
  PERFX_CHECK(M >= 0, std::string(op) + ": M = " + std::to_string(M) + " < 0");
  PERFX_CHECK(xt == DType::F16 || xt == DType::BF16,
              std::string(op) + ": activations must be F16 or BF16, got " + dtype_name(xt));
  PERFX_CHECK(yt == DType::F32 || yt == xt, std::string(op) + ": output dtype " + dtype_name(yt) +
                                                " must be F32 or the activations' " +
                                                dtype_name(xt));
  if (M == 0) return;
  PERFX_CHECK(x != nullptr && y != nullptr, std::string(op) + ": null x or y");
  PERFX_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0,
              std::string(op) + ": x is not 16-byte aligned");
  PERFX_CHECK(ldx % 8 == 0 && ldx >= K,
              std::string(op) + ": ldx = " + std::to_string(ldx) +
                  " must be a multiple of 8 and >= K = " + std::to_string(K));
  PERFX_CHECK(ldy >= N,
              std::string(op) + ": ldy = " + std::to_string(ldy) + " < N = " + std::to_string(N));
  PERFX_CHECK(reinterpret_cast<uintptr_t>(y) % (yt == DType::F32 ? 4 : 2) == 0,
              std::string(op) + ": y is not aligned to its element size");
}

/// Calls f(Tag{}, OutT{}) for activation dtype xt (F16 → frag::F16, else frag::BF16) and output
/// dtype yt (F32 → float, else the activation element type). Callers have checked the pair
/// (check_linear_args).
template <typename F>
void dispatch_act_out(DType xt, DType yt, F&& f) {
  if (xt == DType::F16) {
    if (yt == DType::F32)
      f(frag::F16{}, float{});
    else
      f(frag::F16{}, __half{});
  } else {
    if (yt == DType::F32)
      f(frag::BF16{}, float{});
    else
      f(frag::BF16{}, __nv_bfloat16{});
  }
}

/// Sets every GEMM instance's dynamic shared-memory limit (linear_gemm.cu).
void gemm_init_attributes();
/// Same for the staged-activation GEMV instances (linear_gemv.cu).
void gemv_init_attributes();
/// Same for the w4_gemv2 instances (linear_gemv2.cu).
void gemv2_init_attributes();
/// linear_kernels_describe() parts (linear_gemv.cu, linear_gemm.cu).
std::string describe_gemv_kernels();
std::string describe_gemv2_kernels();
std::string describe_gemv3_kernels();
std::string describe_gemm_kernels();

/// One describe line: name, registers, shared memory, threads, resident CTAs per SM.
std::string describe_kernel(const char* name, const void* fn, int threads, size_t dyn_smem);

}  // namespace perfx::cuda
