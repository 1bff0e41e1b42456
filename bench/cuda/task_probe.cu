// Task-queue persistent probe: can a persistent kernel whose dependencies are per slice, not per
// phase, stream a decode step's weights with fewer bubbles than today's chain of PDL kernels?
//
// docs/cuda_linear_notes.md §34. persistent_probe.cu (§28) measured a persistent kernel with a
// grid barrier between phases slower than the PDL chain; but its phases were all-to-all (every
// "GEMV" read the whole activation row after the barrier). In the real step most dependencies are
// local once the GEMVs are split along K as well as N: a K-slice of the o projection needs only
// its KV group's attention (or QKV rows), a K-slice of the down projection only the gate|up rows
// that produce it. Only the two RMSNorms need the whole vector. This probe models exactly that, on
// the same loads-only layers (probe_stream.cuh: the AWQ W4 g128 byte counts of Llama-2-7B and
// TinyLlama-1.1B, every layer distinct, no arithmetic):
//
//   task        one cooperative kernel (2 CTAs an SM); per layer the phases qkv, [attention], o,
//               gate|up, down, each cut into tasks of ~64 KiB of weights handed out round-robin in
//               slice order; a CTA issues the first ring (8 loads a thread, 32 KiB a CTA) of its
//               next weight task in the last batch of the current one, so loads stay in flight
//               across the task boundary and over the dependency wait; after the wait a task reads
//               the 8 KiB activation row, streams the rest and counts itself in (fence + atomic).
//               Dependencies:
//                 qkv (group g)       <- every down task of the previous layer   (the norm)
//                 attention (group g) <- the qkv tasks of group g
//                 o (K-slice g)       <- attention of g (or, without attention, qkv of g)
//                 gate|up (slice j)   <- every o task                             (the norm)
//                 down (K-slice j)    <- the gate|up tasks of slice j
//   task full   the same tasks, every dependency on the whole previous phase: what the counters
//               cost by themselves against the slicing.
//   loader      the same sliced tasks and dependencies, one CTA an SM split into a loader warp and
//               8 worker warps (the megakernel's split, Hazy Research, 2025): the loader's lane 0
//               copies every weight task of the CTA, in task order, into a ring of shared-memory
//               stages (cp.async.bulk completing on a stage's mbarrier) and never waits on a
//               dependency, only on a free stage; the workers wait on the counters (one thread
//               polls, the 8 warps meet at a named barrier), read the activation row, fold each
//               stage and release it (one mbarrier arrival a warp), then count the task in. So
//               the weights stream through any dependency wait shorter than the ring lasts.
//   ... none    task and loader kernels with no dependency waits at all: each schedule's own
//               streaming ceiling (what its loads cost without the waits);
//   ... bare    the same without the activation row and the arrival a task either.
//   chain       persistent_probe's chain for reference (PDL kernels in a graph): GEMVs only, and
//               with 1-CTA norm kernels and attention kernels.
//   chain loader  the same chain with each loads-only GEMV on the loader / worker split (one CTA
//               an SM, its contiguous share streamed into the ring from the kernel's start).
//   persist loader  one cooperative kernel on the chain's tiling (every phase split evenly over
//               the grid) with the loader / worker split: grid-wide counters where the chain has
//               kernel boundaries, the loader streaming through them.
// Attention (with attention): one task a KV group whose warp 0 follows a chain of dependent loads
// (probe_stream.cuh's chase_chain), as in persistent_probe.
//
// Build: the task_probe target of a CUDA build (sm_90a).
// Run: task_probe [reps=9] [chain=48] [task KiB=64] [poll back-off ns=32] [ring KiB=192]
//                 [stage KiB=16] [interleave=0: the loaders' per-CTA shares contiguous; 1: every
//                 grid-th stage-sized chunk]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define PROBE_NAME "task_probe"
#include "backend/cuda/pdl.cuh"  // pdl_wait, pdl_trigger, launch_kernel_ex
#include "probe_common.cuh"
#include "probe_ring.cuh"
#include "probe_stream.cuh"

namespace {

using namespace probe;

int64_t g_task_bytes = 64 << 10;  // weight bytes a task, about (argv[3] KiB)
int g_ring_kib = 192;             // the loader kernel's shared-memory ring (argv[5])
int g_stage_kib = 16;             // and its stage (argv[6])

/// How one shape's layer is cut into tasks, and where its counters sit.
struct Plan {
  int G;        // KV groups (7B 32, TinyLlama 4): qkv's output slices, o's K-slices
  int J;        // gate|up output slices = down's K-slices
  int t_qkv_g;  // qkv tasks a group
  int t_o_g;    // o tasks a K-slice (row blocks)
  int t_gu_j;   // gate|up tasks a slice
  int t_dn_j;   // down tasks a K-slice (row blocks)
  int stride;   // counters a layer: qkv[G], attn[G], o, gu[J], down
};
__host__ __device__ inline int c_qkv(const Plan& p, int l, int g) {
  return l * p.stride + g;
}
__host__ __device__ inline int c_attn(const Plan& p, int l, int g) {
  return l * p.stride + p.G + g;
}
__host__ __device__ inline int c_o(const Plan& p, int l) {
  return l * p.stride + 2 * p.G;
}
__host__ __device__ inline int c_gu(const Plan& p, int l, int j) {
  return l * p.stride + 2 * p.G + 1 + j;
}
__host__ __device__ inline int c_dn(const Plan& p, int l) {
  return l * p.stride + 2 * p.G + 1 + p.J;
}

struct TaskArgs {
  Layers L;
  Plan P;
  int attn;  // attention tasks between qkv and o
  int full;  // 1: every dependency on the whole previous phase; 2: none (a streaming ceiling);
             // 3: none, and no activation row or arrival a task either (bare streaming)
  const unsigned* chase;
  unsigned chase_n;
  unsigned* ctr;  // zeroed before each launch
  unsigned* act;
  unsigned* sink;
};

/// Task t of T over matrix m: its contiguous units.
__device__ __forceinline__ Mat task_units(const Mat& m, int t, int T) {
  const int64_t per = (m.n + T - 1) / T, b = per * t;
  return Mat{m.p + b, b >= m.n ? 0 : (b + per > m.n ? m.n - b : per)};
}

__constant__ unsigned c_sleep_ns;  // the poll's back-off (argv[4]; 0: spin)
__constant__ int c_interleave;     // argv[7]: the chain and persist loaders' shares interleaved

constexpr int kWorkers = kRingWorkers;  // the loader kernels' worker threads (8 warps), barrier 1

/// The CTA's barrier (kWorkers: only the loader kernel's worker warps, named barrier 1).
template <bool kWorkersOnly>
__device__ __forceinline__ void cta_sync() {
  if constexpr (kWorkersOnly)
    asm volatile("bar.sync 1, %0;" ::"r"(kWorkers) : "memory");
  else
    __syncthreads();
}

/// Thread 0 waits until every counter in [c0, c0 + n) reaches `target`; then the CTA (or the
/// worker warps) goes on.
template <bool kWorkersOnly = false>
__device__ __forceinline__ void wait_ctrs(const unsigned* ctr, int c0, int n, unsigned target) {
  if (threadIdx.x == 0)
    for (int i = 0; i < n; ++i) {
      unsigned v;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                     : "=r"(v)
                     : "l"(ctr + c0 + i)
                     : "memory");
        if (v >= target) break;
        if (c_sleep_ns) __nanosleep(c_sleep_ns);
      }
    }
  cta_sync<kWorkersOnly>();
}
/// The CTA counts itself in at counter c (after its loads and its activation word).
template <bool kWorkersOnly = false>
__device__ __forceinline__ void arrive(unsigned* ctr, int c) {
  cta_sync<kWorkersOnly>();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(ctr + c, 1u);
  }
}

/// Streams task m's units from its ring r (units [0, kRing), already issued) on, kRing loads in
/// flight; the last batch's slot issues the ring of `next` (the CTA's next weight task, n = 0 for
/// none), so the loads stay in flight across the task boundary. Returns the folded loads; r then
/// holds next's ring.
__device__ __forceinline__ uint32_t stream_task(const Mat& m, const Mat& next, uint4 (&r)[kRing]) {
  uint32_t x = 0;
  for (int k = 0;; k += kRing) {
    const bool more = threadIdx.x + int64_t(k + kRing) * kThreads < m.n;
    uint4 n[kRing];
    if (more)
      issue_ring(m, threadIdx.x, kThreads, k + kRing, n);
    else
      issue_ring(next, threadIdx.x, kThreads, 0, n);
#pragma unroll
    for (int j = 0; j < kRing; ++j) x ^= fold(r[j]);
#pragma unroll
    for (int j = 0; j < kRing; ++j) r[j] = n[j];
    if (!more) return x;
  }
}

// Phases of a layer, in the order every CTA takes them.
enum Phase { kQkv = 0, kAttn = 1, kO = 2, kGu = 3, kDn = 4, kNPhases = 5 };

/// A CTA's position in its task list: layer, phase, task index (blockIdx.x + k * gridDim.x).
struct Cursor {
  int l, ph, t;
};

struct Counts {
  int T[kNPhases];
};

/// Moves c to the CTA's next task (t += grid, then on through the phases and layers, skipping
/// phases without a task for this CTA); false past the last layer.
__device__ __forceinline__ bool advance(Cursor& c, const Counts& n, int layers) {
  c.t += gridDim.x;
  while (c.t >= n.T[c.ph]) {
    if (++c.ph == kNPhases) {
      c.ph = 0;
      if (++c.l == layers) return false;
    }
    c.t = blockIdx.x;
  }
  return true;
}
/// The first task at or after c that reads weights (not attention), in `w`; false if none.
__device__ __forceinline__ bool next_weight(Cursor c, const Counts& n, int layers, Cursor& w) {
  do {
    if (!advance(c, n, layers)) return false;
  } while (c.ph == kAttn);
  w = c;
  return true;
}
__device__ __forceinline__ Mat task_mat(const Layers& L, const Counts& n, const Cursor& c) {
  const int mi = c.ph == kQkv ? 0 : c.ph == kO ? 1 : c.ph == kGu ? 2 : 3;
  return task_units(L.m[c.l][mi], c.t, n.T[c.ph]);
}

/// Waits for task c's dependencies (the list in the file's header; `full`: on the whole
/// previous phase instead of the slice).
template <bool kWorkersOnly = false>
__device__ __forceinline__ void wait_deps(const TaskArgs& a, const Counts& n, const Cursor& c) {
  const Plan& P = a.P;
  const int l = c.l;
  if (a.full >= 2) return;  // no dependencies: the schedule's streaming ceiling
  if (c.ph == kAttn) {
    wait_ctrs<kWorkersOnly>(a.ctr, c_qkv(P, l, a.full ? 0 : c.t), a.full ? P.G : 1, P.t_qkv_g);
  } else if (c.ph == kQkv) {
    if (l > 0) wait_ctrs<kWorkersOnly>(a.ctr, c_dn(P, l - 1), 1, n.T[kDn]);
  } else if (c.ph == kO) {
    const int g = c.t / P.t_o_g;
    if (a.attn)
      wait_ctrs<kWorkersOnly>(a.ctr, c_attn(P, l, a.full ? 0 : g), a.full ? P.G : 1, 1);
    else
      wait_ctrs<kWorkersOnly>(a.ctr, c_qkv(P, l, a.full ? 0 : g), a.full ? P.G : 1, P.t_qkv_g);
  } else if (c.ph == kGu) {
    wait_ctrs<kWorkersOnly>(a.ctr, c_o(P, l), 1, n.T[kO]);
  } else {
    const int j = c.t / P.t_dn_j;
    wait_ctrs<kWorkersOnly>(a.ctr, c_gu(P, l, a.full ? 0 : j), a.full ? P.J : 1, P.t_gu_j);
  }
}
/// The counter task c counts itself in at.
__device__ __forceinline__ int task_ctr(const Plan& P, const Cursor& c) {
  return c.ph == kQkv    ? c_qkv(P, c.l, c.t / P.t_qkv_g)
         : c.ph == kAttn ? c_attn(P, c.l, c.t)
         : c.ph == kO    ? c_o(P, c.l)
         : c.ph == kGu   ? c_gu(P, c.l, c.t / P.t_gu_j)
                         : c_dn(P, c.l);
}
__device__ __forceinline__ Counts task_counts(const TaskArgs& a) {
  const Plan& P = a.P;
  return Counts{{P.G * P.t_qkv_g, a.attn ? P.G : 0, P.G * P.t_o_g, P.J * P.t_gu_j, P.J * P.t_dn_j}};
}

__global__ void __launch_bounds__(kThreads, 2) task_kernel(TaskArgs a) {
  const int layers = a.L.n_layers;
  const Counts n = task_counts(a);
  uint32_t x = 0;
  Cursor c{0, 0, (int)blockIdx.x - (int)gridDim.x};
  if (!advance(c, n, layers)) return;
  uint4 r[kRing];
  {
    Cursor w = c;
    const bool have = c.ph != kAttn || next_weight(c, n, layers, w);
    issue_ring(have ? task_mat(a.L, n, w) : Mat{nullptr, 0}, threadIdx.x, kThreads, 0, r);
  }
  do {
    // The dependency (the ring is in flight), then the activation row, the work, the arrival.
    wait_deps(a, n, c);
    if (a.full != 3) x ^= read_act(a.act);
    if (c.ph == kAttn) {  // attention of KV group t
      x ^= chase_chain(a.chase, a.chase_n, c.t * 7919u + threadIdx.x * 104729u);
      if (threadIdx.x == 0) a.act[c.t] = x | 1u;
    } else {
      Cursor w;
      const Mat next = next_weight(c, n, layers, w) ? task_mat(a.L, n, w) : Mat{nullptr, 0};
      x ^= stream_task(task_mat(a.L, n, c), next, r);
      if (threadIdx.x == 0) a.act[(blockIdx.x * 13u + x) % kActWords] = x | 1u;
    }
    if (a.full != 3) arrive(a.ctr, task_ctr(a.P, c));
  } while (advance(c, n, layers));
  sink_if(x, a.sink);
}

// ---- the loader / worker split (probe_ring.cuh: the ring, its mbarriers and bulk copies)

constexpr int kLoaderThreads = kWorkers + 32;  // 8 worker warps, then the loader warp
constexpr int kMaxStages = 64;

/// One CTA an SM: warps 0-7 work the CTA's tasks, lane 0 of warp 8 loads their weights into the
/// ring (`stages` stages of `stage_units` units) in task order, never waiting on a counter.
__global__ void __launch_bounds__(kLoaderThreads, 1)
    loader_kernel(TaskArgs a, int stages, int stage_units) {
  extern __shared__ __align__(128) uint4 ring_data[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const Ring ring{ring_data, full, empty, stages, stage_units};
  const int layers = a.L.n_layers;
  const Counts n = task_counts(a);
  ring.init();
  Cursor c{0, 0, (int)blockIdx.x - (int)gridDim.x};
  if (!advance(c, n, layers)) return;
  int64_t k = 0;
  if (threadIdx.x >= kWorkers) {  // the loader: no dependency waits, only free stages
    if (threadIdx.x != kWorkers) return;
    do {
      if (c.ph == kAttn) continue;
      const Mat m = task_mat(a.L, n, c);
      k = ring.load(m.p, {0, m.n, stage_units}, k);
    } while (advance(c, n, layers));
    return;
  }
  uint32_t x = 0;
  do {
    wait_deps<true>(a, n, c);
    if (a.full != 3) x ^= read_act(a.act);
    if (c.ph == kAttn) {
      x ^= chase_chain(a.chase, a.chase_n, c.t * 7919u + threadIdx.x * 104729u);
      if (threadIdx.x == 0) a.act[c.t] = x | 1u;
    } else {
      k = ring.fold_into(x, {0, task_mat(a.L, n, c).n, stage_units}, k);
      if (threadIdx.x == 0) a.act[(blockIdx.x * 13u + x) % kActWords] = x | 1u;
    }
    if (a.full != 3) arrive<true>(a.ctr, task_ctr(a.P, c));
  } while (advance(c, n, layers));
  sink_if(x, a.sink);
}

/// The chain's loads-only "GEMV" on the loader / worker split (`chain loader` rows): one CTA an
/// SM; lane 0 of warp 8 streams the CTA's share of m (Ring::cta_span) into the stage ring from the
/// kernel's start — weights only, so before griddepcontrol.wait, as w4_gemv3's first ring — and
/// the 8 worker warps wait for the predecessor, read the activation row, fold and release each
/// stage, trigger the successor after the main loop and write one word of the row, as gemv_cta.
__global__ void __launch_bounds__(kLoaderThreads, 1)
    loader_gemv_kernel(Mat m, unsigned* act, unsigned* sink, int stages, int stage_units) {
  extern __shared__ __align__(128) uint4 ring_data[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const Ring ring{ring_data, full, empty, stages, stage_units};
  ring.init();
  const Ring::Span sp = ring.cta_span(m.n, c_interleave);
  if (threadIdx.x >= kWorkers) {  // the loader (the workers' pdl_wait keeps the CTA's contract)
    if (threadIdx.x == kWorkers) ring.load(m.p, sp, 0);
    return;
  }
  perfx::cuda::pdl_wait();
  uint32_t x = read_act(act);
  ring.fold_into(x, sp, 0);
  perfx::cuda::pdl_trigger();
  if (threadIdx.x == 0) act[blockIdx.x % kActWords] = x | 1u;
  sink_if(x, sink);
}

/// `persist loader` rows: the loader / worker split on the chain's tiling — every phase's matrix
/// split evenly over the grid (Ring::cta_span), the loader streaming the CTA's shares
/// of every phase of every layer back to back and never waiting on a counter, the workers waiting
/// at a grid-wide counter where the chain has a kernel boundary (the norms folded into it, as
/// persistent_probe's persist), so a barrier, attention and the norms cost streaming only once
/// the ring is full. Attention (with a.attn) runs on a.P.G CTAs, a different set each layer.
/// Counters: layer l, phase 0 qkv, 1 attention, 2 o, 3 gate|up, 4 down.
__global__ void __launch_bounds__(kLoaderThreads, 1)
    persist_loader_kernel(TaskArgs a, int stages, int stage_units) {
  extern __shared__ __align__(128) uint4 ring_data[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const Ring ring{ring_data, full, empty, stages, stage_units};
  ring.init();
  const int layers = a.L.n_layers, G = a.P.G, grid = gridDim.x;
  if (threadIdx.x >= kWorkers) {  // the loader
    if (threadIdx.x != kWorkers) return;
    int64_t k = 0;
    for (int l = 0; l < layers; ++l)
      for (int p = 0; p < kPhases; ++p) {
        const Mat& m = a.L.m[l][p];
        k = ring.load(m.p, ring.cta_span(m.n, c_interleave), k);
      }
    return;
  }
  auto ctr = [](int l, int ph) { return l * 5 + ph; };
  uint32_t x = 0;
  int64_t k = 0;
  for (int l = 0; l < layers; ++l) {
    for (int p = 0; p < kPhases; ++p) {  // qkv, o, gate|up, down
      if (p == 0) {
        if (l > 0) wait_ctrs<true>(a.ctr, ctr(l - 1, 4), 1, grid);
      } else if (p == 1) {
        if (a.attn)
          wait_ctrs<true>(a.ctr, ctr(l, 1), 1, G);
        else
          wait_ctrs<true>(a.ctr, ctr(l, 0), 1, grid);
      } else {
        wait_ctrs<true>(a.ctr, ctr(l, p), 1, grid);
      }
      x ^= read_act(a.act);
      k = ring.fold_into(x, ring.cta_span(a.L.m[l][p].n, c_interleave), k);
      if (threadIdx.x == 0) a.act[(blockIdx.x * 13u + x) % kActWords] = x | 1u;
      arrive<true>(a.ctr, ctr(l, p == 0 ? 0 : p + 1));
      const int g = (int)((blockIdx.x + grid - (l * G) % grid) % grid);
      if (p == 0 && a.attn && g < G) {  // attention of KV group g
        wait_ctrs<true>(a.ctr, ctr(l, 0), 1, grid);
        x ^= read_act(a.act);
        x ^= chase_chain(a.chase, a.chase_n, g * 7919u + threadIdx.x * 104729u);
        if (threadIdx.x == 0) a.act[g] = x | 1u;
        arrive<true>(a.ctr, ctr(l, 1));
      }
    }
  }
  sink_if(x, a.sink);
}

// ---- host (the chain, for reference: probe_stream.cuh's chain_ms, as persistent_probe runs it)

int tasks_for(int64_t bytes) {
  return (int)std::max<int64_t>(1, (bytes + g_task_bytes / 2) / g_task_bytes);
}

void run_shape(const Shape& sh, int reps, int sms, cudaStream_t st) {
  uint4* w = nullptr;
  int64_t total = 0;
  const Layers L = make_layers(sh.hidden, sh.qkv_out, sh.inter, (int)sh.layers, &w, &total);
  const unsigned chase_n = 32u << 20;
  unsigned* chase = make_chase(chase_n);
  Plan P{};
  P.G = sh.attn_ctas;
  P.J = 64;
  P.t_qkv_g = tasks_for(L.m[0][0].n * 16 / P.G);
  P.t_o_g = tasks_for(L.m[0][1].n * 16 / P.G);
  P.t_gu_j = tasks_for(L.m[0][2].n * 16 / P.J);
  P.t_dn_j = tasks_for(L.m[0][3].n * 16 / P.J);
  P.stride = 2 * P.G + P.J + 2;
  unsigned *act, *ctr, *sink;
  const size_t ctr_bytes = (size_t)P.stride * sh.layers * 4;
  CK(cudaMalloc(&act, kActWords * 4));
  CK(cudaMemset(act, 0, kActWords * 4));
  CK(cudaMalloc(&ctr, ctr_bytes));
  CK(cudaMalloc(&sink, 4));
  const int grid = 2 * sms;
  const double gb = total * 1e-9;
  std::printf("%-10s tasks a layer: qkv %d x %d, o %d x %d, gate|up %d x %d, down %d x %d\n",
              sh.name, P.G, P.t_qkv_g, P.G, P.t_o_g, P.J, P.t_gu_j, P.J, P.t_dn_j);
  auto report = [&](const std::string& mode, float ms) {
    std::printf("%-10s %-34s %9.1f us/step %7.2f us/layer %6.2f TB/s\n", sh.name, mode.c_str(),
                ms * 1e3, ms * 1e3 / sh.layers, gb / (ms * 1e-3) * 1e-3);
    std::fflush(stdout);
  };
  // Median ms of a cooperative launch of k, the counters zeroed before each launch.
  auto coop_ms = [&](const void* k, int g, int threads, void** args, size_t smem) {
    return median_ms(reps, st, [&] {
      CK(cudaMemsetAsync(ctr, 0, ctr_bytes, st));
      CK(cudaLaunchCooperativeKernel(k, g, threads, args, smem, st));
    });
  };
  const int stage_units = g_stage_kib * 64, stages = g_ring_kib / g_stage_kib;
  const size_t ring = (size_t)stages * stage_units * 16;
  CK(cudaFuncSetAttribute(loader_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ring));
  CK(cudaFuncSetAttribute(loader_gemv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int)ring));
  CK(cudaFuncSetAttribute(persist_loader_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int)ring));
  for (int with_attn = 0; with_attn < 2; ++with_attn) {
    report(with_attn ? "chain: gemv+attn+norms (PDL graph)" : "chain: gemv only (PDL graph)",
           chain_ms(L, grid, with_attn, sh.attn_ctas, chase, chase_n, act, sink, reps, st));
    report(
        with_attn ? "chain loader: gemv+attn+norms" : "chain loader: gemv only",
        chain_ms_with(
            L,
            [&](cudaStream_t s, const Mat& m) {
              int su = stage_units, ns = stages;
              CK(perfx::cuda::launch_kernel_ex(loader_gemv_kernel, dim3(sms), dim3(kLoaderThreads),
                                               ring, s, true, m, act, sink, ns, su));
            },
            with_attn, sh.attn_ctas, chase, chase_n, act, sink, reps, st));
    {
      TaskArgs a{L, P, with_attn, 0, chase, chase_n, ctr, act, sink};
      int su = stage_units, ns = stages;
      void* args[] = {&a, &ns, &su};
      report(with_attn ? "persist loader: gemv+attn" : "persist loader: gemv only",
             coop_ms((void*)persist_loader_kernel, sms, kLoaderThreads, args, ring));
    }
    for (int full = 0; full < 4; ++full) {
      TaskArgs a{L, P, with_attn, full, chase, chase_n, ctr, act, sink};
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, task_kernel, kThreads, 0));
      if (per_sm < 2) {
        std::printf("%-10s task: only %d CTA(s) an SM fit; skipped\n", sh.name, per_sm);
        continue;
      }
      void* args[] = {&a};
      const char* kDeps[] = {"sliced", "full", "none", "bare"};
      report(std::string("task ") + kDeps[full] + (with_attn ? " +attn" : ""),
             coop_ms((void*)task_kernel, grid, kThreads, args, 0));
    }
    for (int deps : {0, 2, 3}) {  // the loader / worker split: sliced, none, bare
      TaskArgs a{L, P, with_attn, deps, chase, chase_n, ctr, act, sink};
      int su = stage_units, ns = stages;
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, loader_kernel, kLoaderThreads,
                                                       ring));
      if (per_sm < 1) {
        std::printf("%-10s loader: a %zu-byte ring does not fit an SM; skipped\n", sh.name, ring);
      } else {
        void* args[] = {&a, &ns, &su};
        report(std::string(deps == 0   ? "loader sliced"
                           : deps == 2 ? "loader none"
                                       : "loader bare") +
                   (with_attn ? " +attn" : ""),
               coop_ms((void*)loader_kernel, sms, kLoaderThreads, args, ring));
      }
    }
  }
  CK(cudaFree(w));
  CK(cudaFree(chase));
  CK(cudaFree(act));
  CK(cudaFree(ctr));
  CK(cudaFree(sink));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const int chain = argc > 2 ? std::max(1, std::atoi(argv[2])) : 48;
  g_task_bytes = int64_t(argc > 3 ? std::max(4, std::atoi(argv[3])) : 64) << 10;
  const unsigned sleep_ns = argc > 4 ? (unsigned)std::max(0, std::atoi(argv[4])) : 32;
  g_ring_kib = argc > 5 ? std::max(1, std::atoi(argv[5])) : 192;
  g_stage_kib = argc > 6 ? std::max(1, std::atoi(argv[6])) : 16;
  const int interleave = argc > 7 ? std::atoi(argv[7]) != 0 : 0;
  CK(cudaMemcpyToSymbol(c_interleave, &interleave, sizeof interleave));
  if (g_ring_kib / g_stage_kib < 2 || g_ring_kib / g_stage_kib > kMaxStages) {
    std::fprintf(stderr, "task_probe: error: ring %d KiB / stage %d KiB: 2 to %d stages\n",
                 g_ring_kib, g_stage_kib, kMaxStages);
    return 1;
  }
  set_chain(chain);
  CK(cudaMemcpyToSymbol(c_sleep_ns, &sleep_ns, sizeof sleep_ns));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "device: %s, %d SMs; reps %d; 2 CTAs an SM x %d threads; attention chain %d loads; tasks "
      "~%lld KiB; poll back-off %u ns; loader ring %d KiB in %d KiB stages%s\n",
      prop.name, prop.multiProcessorCount, reps, kThreads, chain, (long long)(g_task_bytes >> 10),
      sleep_ns, g_ring_kib / g_stage_kib * g_stage_kib, g_stage_kib,
      interleave ? ", loader shares interleaved" : "");
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  run_shape(kLlama7B, reps, prop.multiProcessorCount, st);
  run_shape(kTinyLlama, reps, prop.multiProcessorCount, st);
  CK(cudaStreamDestroy(st));
  return 0;
}
