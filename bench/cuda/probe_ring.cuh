// The loader / worker split's shared-memory ring for the schedule probes (task_probe.cu,
// docs/cuda_linear_notes.md §35): mbarrier and bulk-copy PTX (PTX ISA 8.x, sm_90) and `Ring`, a
// CTA's stages of weight chunks that one loader thread fills with cp.async.bulk and kRingWorkers
// worker threads fold and release. Include after probe_common.cuh and pdl.cuh, as
// probe_stream.cuh (whose kThreads and fold it uses).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "probe_stream.cuh"

namespace probe {

constexpr int kRingWorkers = kThreads;  // the worker threads (8 warps) that release a stage

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
/// Returns once the phase of parity `parity` of barrier b has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(b)), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
/// Arrives on b expecting `bytes` of transactions, then copies `bytes` (a multiple of 16) from
/// global src to shared dst, completing them on b.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(b))
      : "memory");
}

/// A CTA's ring of `stages` shared-memory stages of `units` 16-byte units, with a `full` and an
/// `empty` mbarrier a stage. Chunk k of the CTA's weight stream goes to stage k % stages: the
/// loader waits for the stage's empty phase, the workers for its full phase.
struct Ring {
  uint4* data;
  uint64_t* full;
  uint64_t* empty;
  int stages, units;

  /// Thread 0 initialises the barriers (full: the loader's one arrival and the bytes; empty: the
  /// 8 worker warps); then the whole CTA meets.
  __device__ __forceinline__ void init() const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < stages; ++s) {
        mbar_init(&full[s], 1);
        mbar_init(&empty[s], kRingWorkers / 32);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
  }
  /// The chunks of span (u0, end, step): units u0, u0 + step, ... below end, each `units`
  /// long and the last cut at end (step == units: one contiguous piece).
  struct Span {
    int64_t u0, end, step;
  };
  /// The CTA's span of an n-unit matrix split over the grid: one contiguous share of ⌈n / grid⌉
  /// units, or `interleave`d, every grid-th chunk from the CTA's index on (the grid sweeps the
  /// matrix in one front, as the chain's GEMVs do).
  __device__ __forceinline__ Span cta_span(int64_t n, bool interleave) const {
    if (interleave) return {(int64_t)blockIdx.x * units, n, (int64_t)gridDim.x * units};
    const int64_t per = (n + gridDim.x - 1) / gridDim.x, b0 = per * blockIdx.x;
    return {b0, b0 >= n ? b0 : (b0 + per < n ? b0 + per : n), units};
  }
  /// The loader (one thread): copies span sp of p as chunks k, k + 1, ...; returns the next
  /// chunk's k.
  __device__ __forceinline__ int64_t load(const uint4* p, Span sp, int64_t k) const {
    for (int64_t u = sp.u0; u < sp.end; u += sp.step, ++k) {
      const int s = (int)(k % stages);
      mbar_wait(&empty[s], (unsigned)((k / stages) & 1) ^ 1u);
      const int c = (int)(sp.end - u < units ? sp.end - u : units);
      bulk_load(data + (int64_t)s * units, p + u, c * 16u, &full[s]);
    }
    return k;
  }
  /// The worker warps (all 8): fold the chunks the loader copied for the same span from chunk k
  /// on into x, releasing each stage; returns the next chunk's k.
  __device__ __forceinline__ int64_t fold_into(uint32_t& x, Span sp, int64_t k) const {
    for (int64_t u = sp.u0; u < sp.end; u += sp.step, ++k) {
      const int s = (int)(k % stages);
      mbar_wait(&full[s], (unsigned)((k / stages) & 1));
      const int c = (int)(sp.end - u < units ? sp.end - u : units);
      const uint4* st = data + (int64_t)s * units;
      for (int i = threadIdx.x; i < c; i += kRingWorkers) x ^= fold(st[i]);
      __syncwarp();
      if ((threadIdx.x & 31) == 0) mbar_arrive(&empty[s]);
    }
    return k;
  }
};

}  // namespace probe
