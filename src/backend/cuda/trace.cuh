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
  uint64_t t_mark;  // a probe point reached after the wait (PERFX_CUDA_TRACE_PROBE; 0: none)
  uint32_t kind, cta, smid, pad;
};
/// The ring: `n` counts every record ever appended; record i lives at rec[i % cap].
struct TraceBuf {
  unsigned long long n;
  uint32_t cap;
  uint32_t probe;  // PERFX_CUDA_TRACE_PROBE: the probe point that stamps t_prewait or t_mark
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

#if defined(PERFX_CUDA_TRACE) && defined(__CUDACC__) && !defined(PERFX_CUDA_EMULATION)
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
/// by ~TraceScope) and when it passed the probe point after the wait ([2]).
__device__ __forceinline__ uint64_t* trace_wait_slot() {
  __shared__ uint64_t t[3];
  return t;
}
__device__ __forceinline__ void trace_before_wait() {
  // a probe point reached before the wait (PERFX_TRACE_PROBE) keeps its stamp
  if (threadIdx.x == 0 && trace_wait_slot()[0] == 0) trace_wait_slot()[0] = trace_now();
}
__device__ __forceinline__ void trace_waited() {
  if (threadIdx.x == 0) trace_wait_slot()[1] = trace_now();
}
/// Declared first in a kernel: records the CTA's start, and its end when it goes out of scope.
/// Thread 0 reads the run's probe point (PERFX_CUDA_TRACE_PROBE) once here; its first use is at
/// the kernel's first probe point, so the load's latency overlaps the kernel's own work.
struct TraceScope {
  uint64_t tag, t0;
  uint32_t kind, probe;
  __device__ TraceScope(uint32_t k, const void* t) : tag((uint64_t)t), t0(0), kind(k), probe(0) {
    if (threadIdx.x == 0) {
      t0 = trace_now();
      trace_wait_slot()[0] = trace_wait_slot()[1] = trace_wait_slot()[2] = 0;
      const TraceBuf* b = g_trace_buf;
      probe = b != nullptr ? b->probe : 0;
    }
  }
  /// Probe point `id` (a kernel's own numbering; PERFX_TRACE_PROBE): when the run set
  /// PERFX_CUDA_TRACE_PROBE=id, thread 0 stamps its progress here — as the CTA's t_prewait while
  /// its PDL wait has not returned (trace_summary.py's "pre" column then times the prologue up to
  /// this point), else as t_mark ("mark": the wait's return to this point).
  __device__ __forceinline__ void probe_at(uint32_t id) {
    if (threadIdx.x != 0 || probe != id) return;
    trace_wait_slot()[trace_wait_slot()[1] == 0 ? 0 : 2] = trace_now();
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
    r.t_mark = trace_wait_slot()[2];
    r.kind = kind;
    r.cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.smid = smid;
    r.pad = 0;
  }
};
#define PERFX_TRACE(kind, tag) ::perfx::cuda::TraceScope perfx_trace_scope_((kind), (tag))
/// Probe point `id` of a kernel that opened with PERFX_TRACE (TraceScope::probe_at).
#define PERFX_TRACE_PROBE(id) perfx_trace_scope_.probe_at(id)
#else
__device__ __forceinline__ void trace_before_wait() {}
#define PERFX_TRACE_PROBE(id) ((void)0)
__device__ __forceinline__ void trace_waited() {}
#define PERFX_TRACE_BINDER(fn) \
  cudaError_t fn(TraceBuf*) {  \
    return cudaSuccess;        \
  }
#define PERFX_TRACE(kind, tag) ((void)0)
#endif

}  // namespace perfx::cuda
