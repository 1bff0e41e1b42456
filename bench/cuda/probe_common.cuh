// What the standalone GPU probes of bench/cuda share (l2_prefetch_probe.cu, persistent_probe.cu).
// Define PROBE_NAME (the program's name, a string literal) before including.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#ifndef PROBE_NAME
#error "define PROBE_NAME before including probe_common.cuh"
#endif

/// A failed CUDA runtime call ends the probe with one line naming the call and the error.
#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, PROBE_NAME ": error: %s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

/// The decode GEMV's 16-byte weight load (w4_gemv3's: non-coherent path, no L1 allocation,
/// 256-byte L2 prefetch). Volatile, unlike frag::ld_weight_nc, so that a probe's loads stay where
/// and as many as it issues them.
__device__ __forceinline__ uint4 ld_w(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
