// Persistent-decode probe: what would one resident kernel per decode step gain over today's
// chain of PDL kernels, before anyone writes it?
//
// docs/cuda_linear_notes.md §12/§20/§26 leave a 7B decode step at ~1.68 ms for ~3.6 GB of
// weights (~2.2 TB/s), with the GEMVs alone well under the H200's read rate and attention, the
// norms and each kernel boundary on the critical path. The lever the notes name last is a
// persistent kernel that keeps streaming weights across those boundaries. This probe measures
// its ceiling on bare kernels that only *read* a layer's weight bytes (no arithmetic), in the
// exact byte counts of Llama-2-7B and TinyLlama-1.1B AWQ W4 g128 layers, all layers distinct
// (no L2 reuse), so that the only differences between the modes are how work crosses a
// dependency:
//
//   stream   one kernel reads every layer's bytes back to back, no dependency at all: the
//            ceiling of any schedule;
//   chain    today's structure: per layer a QKV "GEMV" kernel, a 32-CTA (7B; 4 for TinyLlama)
//            "attention" kernel (a chain of dependent loads: decode attention's latency shape),
//            the o "GEMV", a 1-CTA "norm" kernel, gate|up, down, a second norm; launched with
//            programmatic dependent launch (PDL) into one CUDA graph; each GEMV kernel issues its
//            first 8 loads a thread (32 KiB a CTA, w4_gemv3's ring) before griddepcontrol.wait
//            and triggers its successor after its main loop, as w4_gemv3 does; attention and the
//            norms trigger at entry;
//   persist  one cooperative kernel of 2 CTAs an SM doing the same phases with a grid barrier
//            between them (an atomic counter), each CTA issuing the next phase's first 8 loads
//            before it arrives; the norm is folded into the barrier (every CTA re-reads the 8 KiB
//            activation row after it, as a real persistent kernel would recompute it), so a
//            layer has 5 barriers instead of 7 kernel boundaries;
//   persist+deep P  as persist, and each CTA also copies units [8, 8 + P) of its share of the
//            next phase into shared memory with cp.async before arriving (P x 4 KiB a CTA) —
//            for gate|up already before the attention barrier, while attention's chains run: the
//            weight streaming a persistent kernel could do while the step is latency-bound.
//
// Every phase kernel reads an 8 KiB "activation" row coherently after its wait / barrier, and
// folds everything it loads into a word stored only in a case that never happens (ptxas drops
// loads whose values are dead). Time: cudaEvent around the graph / the launch, median of reps.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -o persistent_probe
//        bench/cuda/persistent_probe.cu        (the persistent_probe target of a CUDA build)
// Run:   persistent_probe [reps=9] [chain=48]   (one line per (shape, mode): µs a step, µs a layer,
// TB/s)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define PROBE_NAME "persistent_probe"
#include "backend/cuda/pdl.cuh"  // pdl_wait, pdl_trigger, launch_kernel_ex
#include "probe_common.cuh"
#include "probe_stream.cuh"

namespace {

using namespace probe;
using perfx::cuda::pdl_trigger;
using perfx::cuda::pdl_wait;

constexpr int kMaxDeep = 24;  // shared-memory units a thread (24 x 4 KiB = 96 KiB a CTA)

/// cp.async of units [kRing, kRing + deep) of this thread's share into shared slots
/// s[j * kThreads + tid].
__device__ __forceinline__ void issue_deep(const Mat& m, int64_t gtid, int64_t nthr, int deep,
                                           uint4* s) {
  for (int j = 0; j < deep; ++j) {
    const int64_t u = gtid + int64_t(kRing + j) * nthr;
    if (u >= m.n) break;
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(s + j * kThreads + threadIdx.x);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(m.p + u) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ uint32_t fold_deep(const Mat& m, int64_t gtid, int64_t nthr, int deep,
                                              const uint4* s) {
  asm volatile("cp.async.wait_all;" ::: "memory");
  uint32_t x = 0;
  for (int j = 0; j < deep; ++j) {
    if (gtid + int64_t(kRing + j) * nthr >= m.n) break;
    x ^= fold(s[j * kThreads + threadIdx.x]);
  }
  return x;
}

// ---- stream: every layer's bytes, no dependency
__global__ void __launch_bounds__(kThreads, 2) stream_kernel(Layers L, unsigned* sink) {
  const int64_t nthr = (int64_t)gridDim.x * kThreads,
                gtid = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  uint32_t x = 0;
  for (int l = 0; l < L.n_layers; ++l)
    for (int p = 0; p < kPhases; ++p) {
      uint4 r[kRing];
      issue_ring(L.m[l][p], gtid, nthr, 0, r);
      x ^= stream_share(L.m[l][p], gtid, nthr, 0, r, 1 << 30, 1 << 30);
    }
  sink_if(x, sink);
}

// (chain: one kernel per op, PDL; its kernels and graph are probe_stream.cuh's chain_ms)

// ---- persist: one cooperative kernel, a grid barrier between phases
struct PersistArgs {
  Layers L;
  const unsigned* chase;
  unsigned chase_n;
  int attn_ctas;  // 0: no attention phase
  int deep;       // shared-memory units a thread, 0..kMaxDeep
  unsigned* act;
  unsigned* barrier;  // zeroed before each launch
  unsigned* sink;
};

__device__ __forceinline__ void grid_barrier(unsigned* ctr, unsigned& epoch) {
  __syncthreads();
  epoch += gridDim.x;
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(ctr, 1u);
    unsigned v;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
    } while (v < epoch);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 2) persist_kernel(PersistArgs a) {
  extern __shared__ uint4 deep_s[];
  const int64_t nthr = (int64_t)gridDim.x * kThreads,
                gtid = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  unsigned epoch = 0;
  uint32_t x = 0;
  uint4 r[kRing];
  const Layers& L = a.L;
  // Shared memory holds units [kRing, kRing + deep) of `deep_of` (a phase of layer deep_layer).
  int deep_layer = 0, deep_of = 0;
  issue_ring(L.m[0][0], gtid, nthr, 0, r);
  if (a.deep) issue_deep(L.m[0][0], gtid, nthr, a.deep, deep_s);
  for (int l = 0; l < L.n_layers; ++l) {
    for (int p = 0; p < kPhases; ++p) {
      const Mat& m = L.m[l][p];
      const bool have_deep = a.deep && deep_layer == l && deep_of == p;
      if (have_deep) x ^= fold_deep(m, gtid, nthr, a.deep, deep_s);
      x ^= stream_share(m, gtid, nthr, 0, r, have_deep ? kRing : 1 << 30,
                        have_deep ? kRing + a.deep : 1 << 30);
      // The next phase: its ring, and its shared-memory units unless already there.
      const int nl = p + 1 < kPhases ? l : l + 1, np = (p + 1) % kPhases;
      if (nl < L.n_layers) {
        const Mat& n = L.m[nl][np];
        issue_ring(n, gtid, nthr, 0, r);
        if (a.deep && !(deep_layer == nl && deep_of == np)) {
          // o (phase 1) is short: during qkv -> attention -> o, stage gate|up (phase 2) instead.
          const int dp = (np == 1 && a.attn_ctas) ? 2 : np;
          issue_deep(L.m[nl][dp], gtid, nthr, a.deep, deep_s);
          deep_layer = nl;
          deep_of = dp;
        }
      }
      if (threadIdx.x == 0) a.act[blockIdx.x % kActWords] = x | 1u;
      grid_barrier(a.barrier, epoch);
      x ^= read_act(a.act);         // the norm / the activations, recomputed by every CTA
      if (p == 0 && a.attn_ctas) {  // attention between qkv and o
        if ((int)blockIdx.x < a.attn_ctas)
          x ^= chase_chain(a.chase, a.chase_n, blockIdx.x * 7919u + threadIdx.x * 104729u);
        grid_barrier(a.barrier, epoch);
        x ^= read_act(a.act);
      }
    }
  }
  sink_if(x, a.sink);
}

// ---- host
void run_shape(const Shape& sh, int reps, int sms, cudaStream_t st) {
  uint4* w = nullptr;
  int64_t total = 0;
  const Layers L = make_layers(sh.hidden, sh.qkv_out, sh.inter, (int)sh.layers, &w, &total);
  // A random cycle over 32 Mi words (128 MiB, twice the L2).
  const unsigned chase_n = 32u << 20;
  unsigned* chase = make_chase(chase_n);
  unsigned *act, *barrier, *sink;
  CK(cudaMalloc(&act, kActWords * 4));
  CK(cudaMemset(act, 0, kActWords * 4));
  CK(cudaMalloc(&barrier, 4));
  CK(cudaMalloc(&sink, 4));
  const int grid = 2 * sms;
  const double gb = total * 1e-9;
  auto report = [&](const std::string& mode, float ms) {
    std::printf("%-10s %-34s %9.1f us/step %7.2f us/layer %6.2f TB/s\n", sh.name, mode.c_str(),
                ms * 1e3, ms * 1e3 / sh.layers, gb / (ms * 1e-3) * 1e-3);
    std::fflush(stdout);
  };

  report("stream (ceiling)", median_ms(reps, st, [&] {
           stream_kernel<<<grid, kThreads, 0, st>>>(L, sink);
           CK(cudaGetLastError());
         }));

  for (int with_attn = 0; with_attn < 2; ++with_attn)
    report(with_attn ? "chain: gemv+attn+norms (PDL graph)" : "chain: gemv only (PDL graph)",
           chain_ms(L, grid, with_attn, sh.attn_ctas, chase, chase_n, act, sink, reps, st));

  CK(cudaFuncSetAttribute(persist_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          kMaxDeep * kThreads * 16));
  for (int with_attn = 0; with_attn < 2; ++with_attn)
    for (int deep : {0, 8, 16, 24}) {
      PersistArgs a{L, chase, chase_n, with_attn ? sh.attn_ctas : 0, deep, act, barrier, sink};
      const size_t smem = (size_t)deep * kThreads * 16;
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persist_kernel, kThreads, smem));
      if (per_sm < 2) {
        std::printf("%-10s persist deep %d: only %d CTA(s) an SM fit; skipped\n", sh.name, deep,
                    per_sm);
        continue;
      }
      void* args[] = {&a};
      const std::string mode = std::string(with_attn ? "persist: +attn" : "persist: gemv only") +
                               (deep ? " deep " + std::to_string(deep * 4) + "KiB" : "");
      report(
          mode, median_ms(reps, st, [&] {
            CK(cudaMemsetAsync(barrier, 0, 4, st));
            CK(cudaLaunchCooperativeKernel((void*)persist_kernel, grid, kThreads, args, smem, st));
          }));
    }
  CK(cudaFree(w));
  CK(cudaFree(chase));
  CK(cudaFree(act));
  CK(cudaFree(barrier));
  CK(cudaFree(sink));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const int chain = argc > 2 ? std::max(1, std::atoi(argv[2])) : 48;
  set_chain(chain);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "device: %s, %d SMs, L2 %d MiB; reps %d; grid 2 CTAs an SM x %d threads; attention "
      "chain %d loads\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, reps, kThreads, chain);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  run_shape(kLlama7B, reps, prop.multiProcessorCount, st);
  run_shape(kTinyLlama, reps, prop.multiProcessorCount, st);
  CK(cudaStreamDestroy(st));
  return 0;
}
