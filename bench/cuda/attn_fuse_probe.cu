// Attention-fusion probe: what would batch-1 decode attention gain by running inside the QKV
// projection's kernel instead of as a kernel of its own, before anyone writes it?
//
// docs/cuda_attention_notes.md "What attention costs the decode step" measured that without
// attention a TinyLlama step would run 2,090 tok/s (+19.9 %, above the 2,000 target) and a 7B
// step +15.2 %, and that no separate attention kernel can get TinyLlama there: the target leaves
// attention, RoPE and the KV store ~1 µs a layer, less than one PDL boundary. The candidate it
// names is attention inside the QKV kernel, run by a CTA per group once the group's q, k and v
// rows are written, with a fence + counter instead of a kernel boundary. This probe prices that
// structure on the bare kernels of persistent_probe.cu (probe_stream.cuh: loads-only "GEMVs" of
// the exact AWQ W4 g128 byte counts, every layer distinct; an attention of the same shape in every
// mode: stage the group's earlier K and V (keys x head_dim x 2 x fp16) in shared memory with
// cp.async, then read q (the 8 KiB activation row the QKV CTAs write), fold the staged K/V, and
// follow a chain of dependent loads, attention's latency shape). Per layer, with the o GEMV,
// norm, gate|up, down and norm kernels as in every mode:
//
//   chain          today: the QKV GEMV, then an attention kernel of one CTA a group (PDL: it
//                  triggers at entry and stages its K/V before griddepcontrol.wait);
//   chain-room     the same with the QKV grid smaller by one CTA a group, so attention's CTAs
//                  launch beside it and stage their K/V during the projection (the engine's
//                  PERFX_CUDA_QKV_GRID_FREE, linear notes §29);
//   none           no attention (the bound: what a free attention would give);
//   flag           today's two kernels, but attention waits for its group's QKV CTAs on a
//                  counter (fence + atomic, ld.acquire) instead of griddepcontrol.wait for the
//                  whole grid and its memory flush;
//   tail           attention in the QKV kernel: every CTA, after its share, counts itself in its
//                  group (fence + atomic); the group's last CTA stages the K/V and runs the
//                  attention; one boundary fewer, but the staging after the dependency;
//   resident       one extra CTA a group at the front of the QKV grid stages its K/V at once and
//                  spins (ld.acquire) on its group's counter, then runs the attention: one
//                  boundary fewer, the staging before the dependency as today; as many GEMV
//                  CTAs wait for a slot;
//   resident-room  the same with the GEMV grid smaller by one CTA a group (one wave in all).
//
// Every QKV-phase kernel is held to w4_gemv3's occupancy (2 CTAs an SM, no attention CTA beside
// them) by shared memory; the run's first line per shape prints the occupancies. Group g's GEMV
// CTAs are those with index % groups == g (in the engine a group's q, k and v row blocks end at
// about the same time as the rest: every CTA streams an equal share). Counters: one a (layer,
// group), reset by their consumer, the arrivals release adds after the CTA's barrier. Time:
// cudaEvent around one graph of all layers, median of reps.
//
// Build: the attn_fuse_probe target of a -DPERFX_CUDA=ON build, or nvcc -O3 -std=c++17
//        -gencode=arch=compute_90a,code=sm_90a -Isrc -o attn_fuse_probe
//        bench/cuda/attn_fuse_probe.cu
// Run:   attn_fuse_probe [reps=9] [chain=16] [keys=128]   (one line per (shape, mode): µs a step,
//        µs a layer, the difference to chain a layer)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define PROBE_NAME "attn_fuse_probe"
#include "backend/cuda/pdl.cuh"  // pdl_wait, pdl_trigger, launch_kernel_ex
#include "probe_common.cuh"
#include "probe_stream.cuh"

namespace {

using namespace probe;
using perfx::cuda::pdl_trigger;
using perfx::cuda::pdl_wait;

constexpr int kMaxStaged = 4096;  // 16-byte units of K/V staged in shared memory (64 KiB)

/// One step's attention: its groups' earlier K/V, the chase table, the groups' counters.
struct Attn {
  const uint4* kv;  // [layers][groups][kv_units]
  int kv_units;     // 16-byte units of one group's earlier K and V
  int groups;       // attention CTAs a layer
  const unsigned* chase;
  unsigned chase_n;
  unsigned* ctr;  // [layers][groups] arrivals; zero between steps (the consumer resets it)
  unsigned* err;  // set when a CTA gave up waiting on its group (a probe bug, not a measurement)
};

__device__ __forceinline__ const uint4* group_kv(const Attn& a, int layer, int g) {
  return a.kv + ((int64_t)layer * a.groups + g) * a.kv_units;
}
/// cp.async of the first min(units, kMaxStaged) units of `src` into s (one commit group).
__device__ __forceinline__ void stage_kv(const uint4* src, int units, uint4* s) {
  const int n = min(units, kMaxStaged);
  for (int u = threadIdx.x; u < n; u += kThreads) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(s + u);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src + u) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
/// The attention after its dependency: q (the activation row), the staged K/V (and any units
/// past kMaxStaged, loaded now), the chain; group g's output word into the activation row.
__device__ __forceinline__ uint32_t attend(const Attn& a, const uint4* s, unsigned* act, int layer,
                                           int g) {
  uint32_t x = read_act(act);
  asm volatile("cp.async.wait_all;" ::: "memory");
  for (int u = threadIdx.x; u < min(a.kv_units, kMaxStaged); u += kThreads) x ^= fold(s[u]);
  // Units past the staged ones (long contexts), kRing loads a thread in flight.
  const uint4* src = group_kv(a, layer, g);
  for (int u0 = kMaxStaged + threadIdx.x; u0 < a.kv_units; u0 += kRing * kThreads) {
    uint4 v[kRing];
#pragma unroll
    for (int j = 0; j < kRing; ++j) {
      const int u = u0 + j * kThreads;
      v[j] = u < a.kv_units ? ld_w(src + u) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kRing; ++j) x ^= fold(v[j]);
  }
  x ^= chase_chain(a.chase, a.chase_n, (unsigned)(layer * 131 + g) * 7919u + threadIdx.x * 104729u);
  if (threadIdx.x == 0) act[g] = x | 1u;
  return x;
}
/// A GEMV CTA's arrival in its group, after its stores: the CTA's barrier, then thread 0's
/// release add (cumulative: it orders the whole CTA's stores before the count, as the engine's
/// version would do it).
__device__ __forceinline__ void arrive(unsigned* c) {
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}
/// The same with the count before this arrival returned to thread 0 (acquire-release: the last
/// arrival sees every earlier one's stores), 0 in the other threads.
__device__ __forceinline__ unsigned arrive_acq_rel(unsigned* c) {
  __syncthreads();
  unsigned old = 0;
  if (threadIdx.x == 0)
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
  return old;
}
/// Group g's GEMV CTAs out of `ctas` (those with index % groups == g).
__device__ __forceinline__ unsigned members(int ctas, int groups, int g) {
  return ctas / groups + (g < ctas % groups);
}

/// Spins (thread 0, ld.acquire) until group g's `ctas`-CTA share of the QKV GEMV has arrived,
/// resets the counter for the next step, then releases the CTA (its barrier orders the other
/// threads after thread 0's acquire). A broken probe ends with an error, not a hang: after 2^22
/// polls (seconds) a spinner sets a.err, and every spinner gives up once a.err is set.
__device__ __forceinline__ void await_group(const Attn& a, int layer, int g, int ctas) {
  unsigned* c = a.ctr + layer * a.groups + g;
  if (threadIdx.x == 0) {
    const unsigned want = members(ctas, a.groups, g);
    unsigned v, polls = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
      if ((++polls & 255) == 0 && (polls >= 1u << 22 || *(volatile unsigned*)a.err)) {
        atomicOr(a.err, 1u);
        break;
      }
    } while (v < want);
    atomicExch(c, 0u);
  }
  __syncthreads();
}

// ---- chain: attention as its own PDL kernel, one CTA a group
__global__ void __launch_bounds__(kThreads)
    attn_chain_kernel(Attn a, int layer, unsigned* act, unsigned* sink) {
  extern __shared__ uint4 kv_s[];
  pdl_trigger();
  stage_kv(group_kv(a, layer, blockIdx.x), a.kv_units, kv_s);
  pdl_wait();
  sink_if(attend(a, kv_s, act, layer, blockIdx.x), sink);
}

// ---- tail: the QKV GEMV's last CTA of each group runs the group's attention
__global__ void __launch_bounds__(kThreads, 2)
    qkv_tail_kernel(Mat m, Attn a, int layer, unsigned* act, unsigned* sink) {
  extern __shared__ uint4 kv_s[];
  __shared__ int s_last;
  uint32_t x = gemv_cta(m, blockIdx.x, gridDim.x, act);
  const int g = blockIdx.x % a.groups;
  unsigned* c = a.ctr + layer * a.groups + g;
  const unsigned old = arrive_acq_rel(c);
  if (threadIdx.x == 0) {
    s_last = old + 1 == members((int)gridDim.x, a.groups, g);
    if (s_last) atomicExch(c, 0u);  // every member has counted itself: ready for the next step
  }
  __syncthreads();  // orders the CTA after thread 0's acquire
  if (s_last) {
    stage_kv(group_kv(a, layer, g), a.kv_units, kv_s);
    x ^= attend(a, kv_s, act, layer, g);
  }
  sink_if(x, sink);
}

// ---- resident: one attention CTA a group in front of the QKV GEMV's CTAs, spinning on a counter
__global__ void __launch_bounds__(kThreads, 2)
    qkv_resident_kernel(Mat m, Attn a, int layer, unsigned* act, unsigned* sink) {
  extern __shared__ uint4 kv_s[];
  const int gemv_ctas = gridDim.x - a.groups;
  if ((int)blockIdx.x < a.groups) {
    const int g = blockIdx.x;
    pdl_trigger();
    stage_kv(group_kv(a, layer, g), a.kv_units, kv_s);
    await_group(a, layer, g, gemv_ctas);
    sink_if(attend(a, kv_s, act, layer, g), sink);
    return;
  }
  const int j = blockIdx.x - a.groups;
  const uint32_t x = gemv_cta(m, j, gemv_ctas, act);
  arrive(a.ctr + layer * a.groups + j % a.groups);
  sink_if(x, sink);
}

// ---- flag: today's two kernels, attention waiting on its group's counter, not on the grid
__global__ void __launch_bounds__(kThreads, 2)
    qkv_arrive_kernel(Mat m, Attn a, int layer, unsigned* act, unsigned* sink) {
  const uint32_t x = gemv_cta(m, blockIdx.x, gridDim.x, act);
  arrive(a.ctr + layer * a.groups + blockIdx.x % a.groups);
  sink_if(x, sink);
}
__global__ void __launch_bounds__(kThreads)
    attn_flag_kernel(Attn a, int layer, int qkv_ctas, unsigned* act, unsigned* sink) {
  extern __shared__ uint4 kv_s[];
  pdl_trigger();
  stage_kv(group_kv(a, layer, blockIdx.x), a.kv_units, kv_s);
  await_group(a, layer, blockIdx.x, qkv_ctas);
  sink_if(attend(a, kv_s, act, layer, blockIdx.x), sink);
}

// ---- host
enum Mode { kChain, kChainRoom, kNone, kFlag, kTail, kResident, kResidentRoom };
const char* const kModeName[] = {"chain (today)",
                                 "chain-room (QKV grid - groups)",
                                 "none (no attention: the bound)",
                                 "flag (chain, counter not grid wait)",
                                 "tail (last CTA a group)",
                                 "resident (+1 CTA a group)",
                                 "resident-room (GEMV grid - groups)"};

/// One kernel of the chain with `smem` bytes of dynamic shared memory, launched with PDL.
template <typename... P, typename... A>
void launch_pdl_smem(cudaStream_t st, int grid, size_t smem, void (*k)(P...), A... args) {
  CK(perfx::cuda::launch_kernel_ex(k, dim3(grid), dim3(kThreads), smem, st, true, args...));
}

template <typename K>
int ctas_per_sm(K k, size_t smem) {
  int n = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kThreads, smem));
  return n;
}

void run_shape(const Shape& sh, int reps, int keys, const cudaDeviceProp& prop,
               const unsigned* chase, unsigned chase_n, cudaStream_t st) {
  const int sms = prop.multiProcessorCount;
  uint4* w = nullptr;
  int64_t total = 0;
  const Layers L = make_layers(sh.hidden, sh.qkv_out, sh.inter, (int)sh.layers, &w, &total);
  Attn a{};
  a.kv_units = keys * sh.head_dim * 4 / 16;  // K and V, fp16
  a.groups = sh.attn_ctas;
  a.chase = chase;
  a.chase_n = chase_n;
  const int64_t kv_bytes = sh.layers * a.groups * (int64_t)a.kv_units * 16;
  uint4* kv = nullptr;
  CK(cudaMalloc(&kv, kv_bytes));
  CK(cudaMemset(kv, 0x33, kv_bytes));
  a.kv = kv;
  CK(cudaMalloc(&a.ctr, sh.layers * a.groups * 4));
  CK(cudaMemset(a.ctr, 0, sh.layers * a.groups * 4));
  CK(cudaMalloc(&a.err, 4));
  CK(cudaMemset(a.err, 0, 4));
  unsigned *act, *sink;
  CK(cudaMalloc(&act, kActWords * 4));
  CK(cudaMemset(act, 0, kActWords * 4));
  CK(cudaMalloc(&sink, 4));
  const size_t smem = (size_t)std::min(a.kv_units, kMaxStaged) * 16;
  // Every QKV-phase kernel, in every mode, at w4_gemv3's occupancy: 2 CTAs an SM with no room
  // for an attention CTA beside them (the engine's QKV GEMV fills the register file: linear notes
  // §20), which these loads-only kernels (~66 registers) would leave. Shared memory holds them
  // there: 2 x (hold + 1 KiB reserved) fits an SM, an attention CTA's smem + 1 KiB more does not.
  const size_t per_sm = prop.sharedMemPerMultiprocessor, reserved = prop.reservedSharedMemPerBlock;
  const size_t hold = std::max(smem, (per_sm - (smem + reserved)) / 2 - reserved + 1024);
  if (2 * (hold + reserved) > per_sm || hold > prop.sharedMemPerBlockOptin) {
    std::fprintf(stderr,
                 "attn_fuse_probe: error: %zu KiB of shared memory an SM cannot hold two "
                 "QKV CTAs of %zu KiB\n",
                 per_sm >> 10, hold >> 10);
    std::exit(1);
  }
  auto max_smem = [](auto k, size_t bytes) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  };
  max_smem(gemv_kernel, hold);
  max_smem(norm_kernel, 0);
  max_smem(attn_chain_kernel, smem);
  max_smem(attn_flag_kernel, smem);
  max_smem(qkv_arrive_kernel, hold);
  max_smem(qkv_tail_kernel, hold);
  max_smem(qkv_resident_kernel, hold);
  const int grid = 2 * sms;
  if (grid - a.groups < a.groups) {
    std::fprintf(stderr,
                 "attn_fuse_probe: error: %d SMs are too few for %d attention CTAs beside "
                 "the QKV grid\n",
                 sms, a.groups);
    std::exit(1);
  }
  std::printf(
      "%s: %d keys (%d KiB of K/V a group, %zu KiB staged), %d groups; QKV-phase kernels hold %zu "
      "KiB; CTAs an SM: QKV gemv %d, other gemv %d, attention %d, tail %d, resident %d\n",
      sh.name, keys, a.kv_units / 64, smem >> 10, a.groups, hold >> 10,
      ctas_per_sm(gemv_kernel, hold), ctas_per_sm(gemv_kernel, 0),
      ctas_per_sm(attn_chain_kernel, smem), ctas_per_sm(qkv_tail_kernel, hold),
      ctas_per_sm(qkv_resident_kernel, hold));
  float chain_ms = 0;
  for (int mode = kChain; mode <= kResidentRoom; ++mode) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < sh.layers; ++l) {
      switch (mode) {
        case kChain:
        case kChainRoom:
          launch_pdl_smem(st, mode == kChain ? grid : grid - a.groups, hold, gemv_kernel, L.m[l][0],
                          act, sink);
          launch_pdl_smem(st, a.groups, smem, attn_chain_kernel, a, l, act, sink);
          break;
        case kNone:
          launch_pdl_smem(st, grid, hold, gemv_kernel, L.m[l][0], act, sink);
          break;
        case kFlag:
          launch_pdl_smem(st, grid, hold, qkv_arrive_kernel, L.m[l][0], a, l, act, sink);
          launch_pdl_smem(st, a.groups, smem, attn_flag_kernel, a, l, grid, act, sink);
          break;
        case kTail:
          launch_pdl_smem(st, grid, hold, qkv_tail_kernel, L.m[l][0], a, l, act, sink);
          break;
        default:
          launch_pdl_smem(st, (mode == kResident ? grid : grid - a.groups) + a.groups, hold,
                          qkv_resident_kernel, L.m[l][0], a, l, act, sink);
      }
      launch_pdl(st, grid, gemv_kernel, L.m[l][1], act, sink);
      launch_pdl(st, 1, norm_kernel, act, sink);
      launch_pdl(st, grid, gemv_kernel, L.m[l][2], act, sink);
      launch_pdl(st, grid, gemv_kernel, L.m[l][3], act, sink);
      launch_pdl(st, 1, norm_kernel, act, sink);
    }
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    const float ms = median_ms(reps, st, [&] { CK(cudaGraphLaunch(ge, st)); });
    unsigned err = 0;
    CK(cudaMemcpy(&err, a.err, 4, cudaMemcpyDeviceToHost));
    if (err) {
      std::fprintf(stderr, "attn_fuse_probe: error: %s: a group's counter never filled\n",
                   kModeName[mode]);
      std::exit(1);
    }
    if (mode == kChain) chain_ms = ms;
    std::printf("%-10s %-36s %9.1f us/step %7.2f us/layer %+7.2f us/layer vs chain\n", sh.name,
                kModeName[mode], ms * 1e3, ms * 1e3 / sh.layers, (ms - chain_ms) * 1e3 / sh.layers);
    std::fflush(stdout);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  CK(cudaFree(w));
  CK(cudaFree(kv));
  CK(cudaFree(a.ctr));
  CK(cudaFree(a.err));
  CK(cudaFree(act));
  CK(cudaFree(sink));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const int chain = argc > 2 ? std::max(0, std::atoi(argv[2])) : 16;
  const int keys = argc > 3 ? std::max(1, std::atoi(argv[3])) : 128;
  if (keys > 4096) {
    std::fprintf(stderr, "attn_fuse_probe: error: keys %d; at most 4096\n", keys);
    return 1;
  }
  set_chain(chain);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; reps %d; attention chain %d dependent loads, %d keys\n",
              prop.name, prop.multiProcessorCount, reps, chain, keys);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const unsigned chase_n = 32u << 20;  // a random cycle over 128 MiB, more than the L2
  unsigned* chase = make_chase(chase_n);
  run_shape(kLlama7B, reps, keys, prop, chase, chase_n, st);
  run_shape(kTinyLlama, reps, keys, prop, chase, chase_n, st);
  CK(cudaFree(chase));
  CK(cudaStreamDestroy(st));
  return 0;
}
