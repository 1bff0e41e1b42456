// Programmatic dependent launch (PDL, sm_90+; CUDA C++ Programming Guide, "Programmatic Dependent
// Launch and Synchronization"): a kernel launched with the attribute may start while the previous
// kernel of its stream is still running, so its launch latency and its prologue (weight loads)
// overlap that kernel's tail.
//
// The contract of every kernel launched through launch_pdl: each CTA calls pdl_wait() before it
// touches memory that an earlier kernel of the stream writes or reads (activations, the KV cache
// rows of this step, its own outputs), and before it exits (a grid whose CTAs all exit unwaited
// completes before its predecessor, and the next kernel's wait no longer covers that one). Before
// the wait a kernel may read only what no kernel of the chain writes: weights, the batch layout
// the host uploads before the step (positions, slots, block tables, lengths), and the KV rows of
// earlier steps (the split-KV attention's early_kv). pdl_trigger() lets the next grid start
// launching: the small kernels issue it at entry, w4_gemv3 and the W4 GEMM after their main loop
// (measured, docs/cuda_linear_notes.md §10); the next kernel still waits for this one's completion
// before it reads anything. What an earlier kernel of the chain wrote is read only through
// coherent loads (ld_act below, or plain pointers without __restrict__), never ld.global.nc:
// that kernel is alive while this one runs, so its data is not read-only for this kernel's
// lifetime; ctest cuda_pdl_nc_audit (tools/lint/pdl_nc_audit.sh) fails on any ld.global.nc in a
// kernel that waits unless its statement says, with an "nc-ok:" comment on it or right above it,
// why the data is immutable. A kernel launched without the attribute waits for its predecessor as
// usual, so cuBLAS and unconverted kernels mix in safely.
//
// Self-contained (CUDA runtime only): the attention kernels' standalone test builds include it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/trace.cuh"

#if defined(PERFX_CUDA_EMULATION)
/// The CPU emulator's (tests/cuda/cuda_emu.h) record of a thread's wait: reads of the previous
/// kernel's outputs before it fail the emulated run.
void perfx_emu_pdl_wait();
/// The emulator's check of a plain load of the previous kernel's output (fails before the wait).
void perfx_emu_check_read(const void* p, size_t n);
/// The emulator's check of a global load: inside a buffer the test registered, and not of the
/// previous kernel's output before the wait.
void perfx_emu_check_global(const void* p, size_t n);
#endif

namespace perfx::cuda {

/// Waits for the preceding grid's completion and memory flush (a no-op when the grid was not
/// launched with the attribute; compiled out below sm_90; recorded in host-compiled emulation).
__device__ __forceinline__ void pdl_wait() {
#if defined(PERFX_CUDA_EMULATION)
  perfx_emu_pdl_wait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  trace_before_wait();  // trace builds only (trace.cuh): when the CTA entered and left the wait
  asm volatile("griddepcontrol.wait;" ::: "memory");
  trace_waited();
#endif
}
/// Allows the next grid of the stream to start launching.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/// pdl_trigger() then pdl_wait(): the entry of a kernel with nothing to prefetch.
__device__ __forceinline__ void pdl_enter() {
  pdl_trigger();
  pdl_wait();
}

/// 16-byte coherent global load of activations (written by the previous kernel of the stream).
/// Not ld.global.nc (__ldg): under PDL that kernel is still alive when this one starts, so the
/// data is not read-only for this kernel's lifetime, which the non-coherent path requires (PTX
/// ISA, ld: ".nc"); w4_gemv3 read stale activations that way (docs/cuda_linear_notes.md §27).
/// Kernels read such data with this, or through plain pointers without __restrict__ (nvcc may
/// turn a const __restrict__ pointer's loads into ld.global.nc).
__device__ __forceinline__ uint4 ld_act(const void* p) {
  uint4 r;
#if defined(PERFX_CUDA_EMULATION)
  perfx_emu_check_global(p, 16);
  std::memcpy(&r, p, 16);
#else
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p)
               : "memory");
#endif
  return r;
}

/// A plain load of what an earlier kernel of the chain wrote (the QKV projection's q for RoPE, the
/// residual for the GEMV's fused add): coherent (not __restrict__, so never ld.global.nc); the CPU
/// emulator checks that it follows the thread's pdl_wait().
template <typename U>
__device__ __forceinline__ U ld_prev(const U* p) {
#if defined(PERFX_CUDA_EMULATION)
  perfx_emu_check_read(p, sizeof(U));
#endif
  return *p;
}

/// Whether kernels make the early reads the contract above allows beyond weights: the batch
/// layout and the KV rows of earlier steps (RoPE's cos/sin table, the split-KV attention's
/// early_kv) and the norms' γ. PERFX_CUDA_PDL_EARLY=0 (read once) moves those reads after the wait
/// (a measurement knob; docs/cuda_attention_notes.md); unset or any other value: on.
inline bool pdl_early_reads() {
  static const bool on = [] {
    const char* e = std::getenv("PERFX_CUDA_PDL_EARLY");
    return !(e != nullptr && std::strcmp(e, "0") == 0);
  }();
  return on;
}

/// Whether launch_pdl adds the attribute: the current device is sm_90 (the architecture the sm_90a
/// code with griddepcontrol is built for; other GPUs run the compute_80 code, where pdl_wait
/// compiles to nothing) and the environment does not set PERFX_CUDA_PDL=0. Read once per device;
/// false when the device cannot be queried.
inline bool pdl_enabled() {
  static const bool env_off = [] {
    const char* e = std::getenv("PERFX_CUDA_PDL");
    return e != nullptr && std::strcmp(e, "0") == 0;
  }();
  if (env_off) return false;
  static std::atomic<int> cached[16] = {};  // 0 unknown, 1 off (not sm_90), 2 on
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) return false;
  int v = cached[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    v = major == 9 ? 2 : 1;
    cached[dev].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

/// fn<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx; pdl adds programmatic
/// dependent launch (fn must keep the contract above). Capturable into CUDA graphs. Returns the
/// launch's error (also left for cudaGetLastError, as with <<<>>>).
template <typename... P, typename... A>
cudaError_t launch_kernel_ex(void (*fn)(P...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, bool pdl, A&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, fn, std::forward<A>(args)...);
}

/// launch_kernel_ex with pdl = pdl_enabled(): the launch of the kernels on the decode path.
/// Errors are reported like <<<>>>'s: through cudaGetLastError (the callers check it).
template <typename... P, typename... A>
void launch_pdl(void (*fn)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                A&&... args) {
  (void)launch_kernel_ex(fn, grid, block, smem, stream, pdl_enabled(), std::forward<A>(args)...);
}

}  // namespace perfx::cuda
