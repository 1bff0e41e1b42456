// Per-CTA timestamps of the decode kernels inside the captured step (builds configured with
// -DPERFX_CUDA_TRACE=ON only; elsewhere every piece here compiles to nothing).
//
// Why: the step is one CUDA graph of PDL-chained kernels, and what a kernel costs there differs
// from its cost alone (docs/cuda_linear_notes.md §12, §20); Nsight Systems is not on the GPU
// machine. Thread 0 of every CTA of an instrumented kernel appends one record to a ring in device
// memory: the kernel kind, a tag telling its launches apart (a per-layer weight or cache pointer),
// the CTA, its SM, and %globaltimer (ns, PTX ISA §10 "Special registers") at CTA start, when its
// griddepcontrol.wait was entered and returned (0 if it has none) and at CTA end (thread 0's). The
// backend binds the ring (PERFX_CUDA_TRACE=FILE) and writes it as CSV when it is destroyed;
// tools/device/trace_summary.py turns that into per-launch spans and the gaps between them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace perfx::cuda {

/// One CTA of one launch. Times in ns of %globaltimer.
struct TraceRec {
  uint64_t tag, t_start, t_prewait, t_wait, t_end;
  uint32_t kind, cta, smid, pad;
};
/// The ring: `n` counts every record ever appended; record i lives at rec[i % cap].
struct TraceBuf {
  unsigned long long n;
  uint32_t cap;
  uint32_t probe;  // PERFX_CUDA_TRACE_PROBE: the probe point that stamps t_prewait (0: none)
  TraceRec rec[1];
};
enum TraceKind : uint32_t {
  kTrGemv3 = 1,
  kTrGemv1,
  kTrAttn,
  kTrAttnReduce,
  kTrNorm,
  kTrRope,
  kTrArgmax,
  kTrDenseGemv,
  kTrEmbed,
  kTrSample,
};
/// The kinds' names, index = TraceKind (0: unknown).
inline const char* trace_kind_name(uint32_t k) {
  static const char* const names[] = {"?",           "gemv3", "gemv1", "attn",
                                      "attn_reduce", "norm",  "rope",  "argmax",
                                      "dense_gemv",  "embed", "sample"};
  return k < sizeof names / sizeof names[0] ? names[k] : "?";
}

/// Binds the ring (null: unbind) in every translation unit with instrumented kernels; cudaSuccess
/// without PERFX_CUDA_TRACE. Defined by PERFX_TRACE_BINDER in each of them.
cudaError_t trace_bind_gemv3(TraceBuf* b);
cudaError_t trace_bind_gemv1(TraceBuf* b);
cudaError_t trace_bind_attn_decode(TraceBuf* b);
cudaError_t trace_bind_kernels(TraceBuf* b);
cudaError_t trace_bind_rope(TraceBuf* b);
cudaError_t trace_bind_sample(TraceBuf* b);
inline cudaError_t trace_bind_all(TraceBuf* b) {
  cudaError_t (*const binders[])(TraceBuf*) = {trace_bind_gemv3,       trace_bind_gemv1,
                                               trace_bind_attn_decode, trace_bind_kernels,
                                               trace_bind_rope,        trace_bind_sample};
  for (auto* f : binders)
    if (const cudaError_t e = f(b); e != cudaSuccess) return e;
  return cudaSuccess;
}
/// Whether this build records (PERFX_CUDA_TRACE=ON).
constexpr bool kTraceBuilt =
#if defined(PERFX_CUDA_TRACE)
    true;
#else
    false;
#endif

#if defined(PERFX_CUDA_TRACE) && defined(__CUDACC__) && !defined(PERFX_ATTN_EMULATION)
namespace {
__device__ TraceBuf* g_trace_buf = nullptr;  // one per translation unit, bound by its binder
}
#define PERFX_TRACE_BINDER(fn)                            \
  cudaError_t fn(TraceBuf* b) {                           \
    return cudaMemcpyToSymbol(g_trace_buf, &b, sizeof b); \
  }

__device__ __forceinline__ uint64_t trace_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
/// When the CTA's griddepcontrol.wait was entered and returned ([0], [1]; set by pdl_wait, read
/// by ~TraceScope).
__device__ __forceinline__ uint64_t* trace_wait_slot() {
  __shared__ uint64_t t[2];
  return t;
}
__device__ __forceinline__ void trace_before_wait() {
  // a probe point reached before the wait (trace_probe) keeps its stamp
  if (threadIdx.x == 0 && trace_wait_slot()[0] == 0) trace_wait_slot()[0] = trace_now();
}
/// Probe point `id` (1, 2, ...: a kernel's own numbering): when the run set
/// PERFX_CUDA_TRACE_PROBE=id and the CTA's PDL wait has not returned yet, its t_prewait is
/// stamped here instead of at the wait's entry, so trace_summary.py's "pre" column times the
/// prologue up to this point (thread 0's progress). A probe reached after the wait (a kernel that
/// waits at entry) records nothing. Each call costs thread 0 two dependent global loads (the ring,
/// then its probe field), whatever the variable says: probe points are for probe runs.
__device__ __forceinline__ void trace_probe(uint32_t id) {
  if (threadIdx.x != 0 || trace_wait_slot()[1] != 0) return;
  const TraceBuf* b = g_trace_buf;
  if (b != nullptr && b->probe == id) trace_wait_slot()[0] = trace_now();
}
__device__ __forceinline__ void trace_waited() {
  if (threadIdx.x == 0) trace_wait_slot()[1] = trace_now();
}
/// Declared first in a kernel: records the CTA's start, and its end when it goes out of scope.
struct TraceScope {
  uint64_t tag, t0;
  uint32_t kind;
  __device__ TraceScope(uint32_t k, const void* t) : tag((uint64_t)t), t0(0), kind(k) {
    if (threadIdx.x == 0) {
      t0 = trace_now();
      trace_wait_slot()[0] = trace_wait_slot()[1] = 0;
    }
  }
  __device__ ~TraceScope() {
    TraceBuf* b = g_trace_buf;
    if (threadIdx.x != 0 || b == nullptr) return;
    const uint64_t t1 = trace_now();
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    const unsigned long long i = atomicAdd(&b->n, 1ull);
    TraceRec& r = b->rec[i % b->cap];
    r.tag = tag;
    r.t_start = t0;
    r.t_prewait = trace_wait_slot()[0];
    r.t_wait = trace_wait_slot()[1];
    r.t_end = t1;
    r.kind = kind;
    r.cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.smid = smid;
    r.pad = 0;
  }
};
#define PERFX_TRACE(kind, tag) ::perfx::cuda::TraceScope perfx_trace_scope_((kind), (tag))
#else
__device__ __forceinline__ void trace_before_wait() {}
__device__ __forceinline__ void trace_probe(uint32_t) {}
__device__ __forceinline__ void trace_waited() {}
#define PERFX_TRACE_BINDER(fn) \
  cudaError_t fn(TraceBuf*) {  \
    return cudaSuccess;        \
  }
#define PERFX_TRACE(kind, tag) ((void)0)
#endif

}  // namespace perfx::cuda
