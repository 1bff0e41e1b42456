// The decode-step model the schedule probes share (persistent_probe.cu, attn_fuse_probe.cu,
// task_probe.cu): bare kernels that only *read* a layer's AWQ W4 g128 weight bytes (no
// arithmetic), an 8 KiB "activation" row handed from kernel to kernel, and attention's latency
// shape as a chain of dependent loads. Include after probe_common.cuh (PROBE_NAME, CK, ld_w) and
// pdl.cuh.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace probe {

constexpr int kThreads = 256;
constexpr int kRing = 8;         // 16-byte loads a thread in flight (w4_gemv3's ring: 32 KiB a CTA)
constexpr int kActWords = 2048;  // the 8 KiB activation row
constexpr int kPhases = 4;       // qkv, o, gate|up, down

/// One weight matrix of one layer, in 16-byte units.
struct Mat {
  const uint4* p;
  int64_t n;
};
struct Layers {
  Mat m[32][kPhases];  // [layer][phase] (kernel parameters stay under 4 KiB)
  int n_layers;
};

__device__ __forceinline__ uint32_t fold(uint4 v) {
  return v.x ^ v.y ^ v.z ^ v.w;
}

/// The activation row, read coherently (it is written by the phase before).
__device__ __forceinline__ uint32_t read_act(const unsigned* act) {
  uint32_t x = 0;
  for (int i = threadIdx.x; i < kActWords; i += kThreads) x ^= *(volatile const unsigned*)(act + i);
  return x;
}

/// Units [k0, k0 + kRing) of this thread's share (unit k is gtid + k * nthr).
__device__ __forceinline__ void issue_ring(const Mat& m, int64_t gtid, int64_t nthr, int k0,
                                           uint4 (&r)[kRing]) {
#pragma unroll
  for (int j = 0; j < kRing; ++j) {
    const int64_t u = gtid + (k0 + j) * nthr;
    r[j] = u < m.n ? ld_w(m.p + u) : make_uint4(0, 0, 0, 0);
  }
}
/// Folds the ring (units [k0, k0 + kRing)) and streams the share from k0 + kRing on, kRing
/// loads in flight; skips units [skip0, skip1) (already in shared memory).
__device__ __forceinline__ uint32_t stream_share(const Mat& m, int64_t gtid, int64_t nthr, int k0,
                                                 uint4 (&r)[kRing], int skip0 = 1 << 30,
                                                 int skip1 = 1 << 30) {
  uint32_t x = 0;
  int k = k0;
  for (;;) {
    int kn = k + kRing;
    if (kn >= skip0 && kn < skip1) kn = skip1;
    const bool more = gtid + int64_t(kn) * nthr < m.n;
    uint4 n[kRing];
    if (more) issue_ring(m, gtid, nthr, kn, n);
#pragma unroll
    for (int j = 0; j < kRing; ++j) x ^= fold(r[j]);
    if (!more) break;
#pragma unroll
    for (int j = 0; j < kRing; ++j) r[j] = n[j];
    k = kn;
  }
  return x;
}

__constant__ int c_chain;  // dependent loads of one attention CTA's chain (set by set_chain)

/// Attention's latency shape: warp 0 of the CTA follows c_chain dependent loads through `chase`
/// (a random cycle over a table larger than L2, make_chase), lane-strided starting points.
__device__ __forceinline__ uint32_t chase_chain(const unsigned* chase, unsigned n, unsigned start) {
  unsigned i = start % n;
  if (threadIdx.x < 32)
    for (int s = 0; s < c_chain; ++s) i = *(volatile const unsigned*)(chase + i);
  return i;
}

/// Keeps a folded value live (ptxas drops loads whose values are dead) with a store that never
/// happens in practice.
__device__ __forceinline__ void sink_if(uint32_t x, unsigned* sink) {
  if (x == 0x9e3779b9u) atomicAdd(sink, 1u);
}

// ---- the chain's kernels (launched with PDL, launch_pdl)

/// A loads-only "GEMV" CTA, number `cta` of `ctas` streaming `m`: issues its first ring before
/// griddepcontrol.wait, reads the activation row after it, streams its share and triggers its
/// successor after its main loop, as w4_gemv3 does; one word of the activation row out. Returns
/// the folded loads.
__device__ __forceinline__ uint32_t gemv_cta(const Mat& m, int cta, int ctas, unsigned* act) {
  const int64_t nthr = (int64_t)ctas * kThreads, gtid = (int64_t)cta * kThreads + threadIdx.x;
  uint4 r[kRing];
  issue_ring(m, gtid, nthr, 0, r);
  perfx::cuda::pdl_wait();
  uint32_t x = read_act(act);
  x ^= stream_share(m, gtid, nthr, 0, r);
  perfx::cuda::pdl_trigger();
  if (threadIdx.x == 0) act[cta % kActWords] = x | 1u;
  return x;
}
/// A loads-only "GEMV" kernel: every CTA a gemv_cta.
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(Mat m, unsigned* act, unsigned* sink) {
  sink_if(gemv_cta(m, blockIdx.x, gridDim.x, act), sink);
}
/// A 1-CTA "norm": triggers at entry, reads the activation row after its wait, writes it.
__global__ void __launch_bounds__(kThreads) norm_kernel(unsigned* act, unsigned* sink) {
  perfx::cuda::pdl_trigger();
  perfx::cuda::pdl_wait();
  uint32_t x = read_act(act);
  __syncthreads();
  for (int i = threadIdx.x; i < kActWords; i += kThreads) act[i] = x + i;
  sink_if(x, sink);
}

/// The chain's "attention": one CTA a KV head (group), triggering at entry; after its wait warp 0
/// follows chase_chain; one word of the activation row out.
__global__ void __launch_bounds__(kThreads)
    chain_attn_kernel(const unsigned* chase, unsigned n, unsigned* act, unsigned* sink) {
  perfx::cuda::pdl_trigger();
  perfx::cuda::pdl_wait();
  uint32_t x = read_act(act);
  x ^= chase_chain(chase, n, blockIdx.x * 7919u + threadIdx.x * 104729u);
  if (threadIdx.x == 0) act[blockIdx.x] = x | 1u;
  sink_if(x, sink);
}

// ---- host

/// A model shape: hidden size, QKV output rows, intermediate size, layers, the attention CTAs of
/// one decode step's layer (one a KV head: 7B's 32 heads, TinyLlama's 4 GQA groups of 8) and the
/// head dimension.
struct Shape {
  const char* name;
  int64_t hidden, qkv_out, inter, layers;
  int attn_ctas, head_dim;
};
inline constexpr Shape kLlama7B{"7B", 4096, 3 * 4096, 11008, 32, 32, 128};
inline constexpr Shape kTinyLlama{"TinyLlama", 2048, 2048 + 2 * 256, 5632, 22, 4, 64};

/// One kernel of a chain, launched with programmatic dependent launch (pdl.cuh); grid CTAs of
/// kThreads threads.
template <typename... P, typename... A>
void launch_pdl(cudaStream_t st, int grid, void (*k)(P...), A... args) {
  CK(perfx::cuda::launch_kernel_ex(k, dim3(grid), dim3(kThreads), 0, st, true, args...));
}

/// AWQ W4 g128 bytes of a K x N matrix: 4-bit weights, and per 128 inputs an fp16 scale and a
/// 4-bit zero for each output.
inline int64_t w4_bytes(int64_t k, int64_t n) {
  return k * n / 2 + (k / 128) * n * 2 + (k / 128) * n / 2;
}

inline void set_chain(int chain) {
  CK(cudaMemcpyToSymbol(c_chain, &chain, sizeof chain));
}

/// Median milliseconds of `reps` timed calls of `launch` on `st` (cudaEvent pairs), after one
/// untimed warm-up call.
template <typename F>
float median_ms(int reps, cudaStream_t st, F&& launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  launch();
  CK(cudaStreamSynchronize(st));
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0, st));
    launch();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return t[t.size() / 2];
}

/// Median milliseconds of one decode step as today's chain (PDL kernels captured in one graph):
/// per layer the four loads-only GEMVs (`gemv(st, m)` launches one; by default gemv_kernel on
/// `grid` CTAs), and with `with_attn` an attention kernel of `attn_ctas` CTAs after qkv and a
/// 1-CTA norm kernel after o and after down.
template <typename G>
float chain_ms_with(const Layers& L, G&& gemv, bool with_attn, int attn_ctas, const unsigned* chase,
                    unsigned chase_n, unsigned* act, unsigned* sink, int reps, cudaStream_t st) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < L.n_layers; ++l) {
    gemv(st, L.m[l][0]);
    if (with_attn) launch_pdl(st, attn_ctas, chain_attn_kernel, chase, chase_n, act, sink);
    gemv(st, L.m[l][1]);
    if (with_attn) launch_pdl(st, 1, norm_kernel, act, sink);
    gemv(st, L.m[l][2]);
    gemv(st, L.m[l][3]);
    if (with_attn) launch_pdl(st, 1, norm_kernel, act, sink);
  }
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  const float ms = median_ms(reps, st, [&] { CK(cudaGraphLaunch(ge, st)); });
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms;
}
inline float chain_ms(const Layers& L, int grid, bool with_attn, int attn_ctas,
                      const unsigned* chase, unsigned chase_n, unsigned* act, unsigned* sink,
                      int reps, cudaStream_t st) {
  return chain_ms_with(
      L, [&](cudaStream_t s, const Mat& m) { launch_pdl(s, grid, gemv_kernel, m, act, sink); },
      with_attn, attn_ctas, chase, chase_n, act, sink, reps, st);
}

/// A device table of n words holding a random cycle (word i is the index of i's successor), for
/// chase_chain; fixed seed.
inline unsigned* make_chase(unsigned n) {
  std::vector<unsigned> perm(n), next(n);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  for (unsigned i = 0; i < n; ++i) next[perm[i]] = perm[(i + 1) % n];
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, n * 4ull));
  CK(cudaMemcpy(d, next.data(), n * 4ull, cudaMemcpyHostToDevice));
  return d;
}

/// A layer-by-layer model of one decode step: the four matrices' W4 byte counts of a
/// (hidden, qkv_out, inter) shape, every layer distinct (no L2 reuse across layers), in one
/// allocation (`*w`, to be freed by the caller); `*total` its bytes.
inline Layers make_layers(int64_t hidden, int64_t qkv_out, int64_t inter, int layers, uint4** w,
                          int64_t* total) {
  if (layers > 32) {
    std::fprintf(stderr, PROBE_NAME ": error: %d layers; the probe holds 32\n", layers);
    std::exit(1);
  }
  const int64_t bytes[kPhases] = {w4_bytes(hidden, qkv_out), w4_bytes(hidden, hidden),
                                  w4_bytes(hidden, 2 * inter), w4_bytes(inter, hidden)};
  int64_t layer_units = 0;
  for (int64_t b : bytes) layer_units += (b + 15) / 16;
  *total = layer_units * 16 * layers;
  CK(cudaMalloc(w, *total));
  CK(cudaMemset(*w, 0x5a, *total));
  Layers L{};
  L.n_layers = layers;
  int64_t off = 0;
  for (int l = 0; l < layers; ++l)
    for (int p = 0; p < kPhases; ++p) {
      L.m[l][p] = {*w + off, (bytes[p] + 15) / 16};
      off += (bytes[p] + 15) / 16;
    }
  return L;
}

}  // namespace probe
