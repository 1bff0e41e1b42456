// Bulk asynchronous copies (the TMA unit's non-tensor form) into shared memory, completed on an
// mbarrier: the few PTX instructions w4_gemv3's shared-memory ring needs (PTX ISA 8.x,
// "cp.async.bulk" and "mbarrier"; sm_90 and later).
//
// Protocol, one mbarrier per ring stage, arrival count 1:
//   producer (one lane): mbar_arrive_expect_tx(bar, bytes); bulk_copy_g2s(dst, src, n, bar) for
//   pieces summing to `bytes` — the phase completes when all bytes have landed;
//   consumer (every lane): mbar_wait_parity(bar, phase), read the stage, then release it for the
//   next copy (here: __syncwarp, since the producer lane belongs to the consuming warp).
// Below sm_90 every helper traps: callers select the ring only on sm_90 devices.
#pragma once

#include <cstdint>

namespace perfx::cuda::tma {

/// Shared-memory address (the .shared::cta window) of a pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// mbarrier.init with arrival count `count`.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#else
  (void)bar, (void)count;
  __trap();
#endif
}

/// Makes initialised mbarriers visible to the async proxy (the bulk copies that complete on them).
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/// This thread's arrival, announcing `bytes` more bytes of transactions for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  (void)bar, (void)bytes;
  __trap();
#endif
}

/// A plain arrival (completes a phase that expects no bytes).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#else
  (void)bar;
  __trap();
#endif
}

/// Spins until the phase with parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait_parity(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred P;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\n @!P bra "
      "WAIT;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
#else
  (void)bar, (void)parity;
  __trap();
#endif
}

/// Orders this thread's earlier generic-proxy accesses to shared memory before its later
/// async-proxy ones (a stage read by the warp, then overwritten by a bulk copy).
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/// Copies `bytes` (a multiple of 16; src and dst 16-byte aligned) from global to shared memory,
/// completing `bytes` transactions on mbarrier `bar` (cp.async.bulk, sm_90).
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                              uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#else
  (void)dst, (void)src, (void)bytes, (void)bar;
  __trap();
#endif
}

}  // namespace perfx::cuda::tma
