// L2 prefetch probe: does a weight range handed to L2 ahead of time make its later streaming
// read faster on this GPU, and what does handing it over cost?
//
// docs/cuda_linear_notes.md §11 and §23 measured decode *slower* in proportion to the bytes
// prefetched (cp.async.bulk.prefetch.L2 from w4_gemv3), with two untested explanations: the
// prefetching grid does not retire until its bulk prefetches complete (so the next kernel waits
// for them), or the prefetched lines are not hit by the later read. This probe separates the two
// on bare kernels, outside the engine:
//
//   reader   the GEMV's weight load (ld.global.nc.L1::no_allocate.L2::256B, 16 bytes a thread,
//            8 loads in flight, a one-wave grid of 2 CTAs an SM), timed by %globaltimer from the
//            first CTA's start to the last CTA's end (ns; the H200 ticks every 32 ns);
//   states   cold (L2 flushed by streaming a buffer 8x the L2 size), hot (the same read just
//            before), after a bulk prefetch kernel (cp.async.bulk.prefetch.L2, 4 KiB pieces; with
//            the reader's CTA map too), after a per-line prefetch kernel (prefetch.global.L2),
//            after a kernel of plain loads (the reader's CTA map, shifted by 1 and by #SMs; read
//            back by the GEMV load and by ld.global.cs), after cp.async.cg / cp.async.ca /
//            cp.async.cg with an L2 evict_last policy into a shared scratch slot; each handing-over
//            kernel's own duration too;
//   overlap  a 32-CTA "latency" kernel (a chain of 24 dependent loads, as decode attention) while
//            the grid's other CTAs idle, bulk-prefetch or load the range; the chain's time, then
//            the read.
//
// Found on the H200 (§26): the prefetch instructions and cp.async.cg leave nothing in L2; plain
// loads and cp.async.ca do, whichever SM reads the lines later.
//
// Build: the l2_prefetch_probe target of a -DPERFX_CUDA=ON build, or nvcc -O3 -std=c++17
//        -gencode=arch=compute_90a,code=sm_90a -o l2_prefetch_probe bench/cuda/l2_prefetch_probe.cu
// Run:   l2_prefetch_probe [reps=15]  (one line per (size, state): median / min ns, GB/s)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_NAME "l2_prefetch_probe"
#include "probe_common.cuh"

namespace {

struct Span {
  unsigned long long t0, t1;
};
__device__ int* g_smid_of;  // read_kernel's CTA -> SM map, when set

__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void span_begin(Span* s) {
  if (threadIdx.x == 0) atomicMin(&s->t0, gtimer());
}
__device__ __forceinline__ void span_end(Span* s) {
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&s->t1, gtimer());
}

/// cp.async.bulk.prefetch.L2 of 4 KiB (sm_90; a no-op in the sm_80 build).
__device__ __forceinline__ void bulk_prefetch_4k(const char* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(4096) : "memory");
#else
  (void)p;
#endif
}

/// Streams n16 16-byte words, 8 loads in flight a thread, with the GEMV's weight load (CS false:
/// w4_gemv3's ld.global.nc.L1::no_allocate.L2::256B; true: w4_gemv's ld.global.cs, evict-first);
/// XOR of all into sink (never 0 here, so the loads cannot be dropped). Records each CTA's SM in
/// g_smid_of when set.
template <bool CS>
__global__ void __launch_bounds__(256)
    read_kernel(const uint4* __restrict__ w, int64_t n16, unsigned* sink, Span* span) {
  span_begin(span);
  constexpr int U = 8;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  uint32_t x = 0;
  for (int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < n16; i0 += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = i0 + u * stride;
      v[u] = i >= n16 ? make_uint4(0, 0, 0, 0) : CS ? __ldcs(w + i) : ld_w(w + i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (x == 0x9e3779b9u) atomicAdd(sink, 1u);
  if (threadIdx.x == 0 && g_smid_of) {
    int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_smid_of[blockIdx.x] = sm;
  }
  span_end(span);
}

/// Warming loads: a thread loads its strided share of the range (16 bytes at index first,
/// first + stride, ...) with the GEMV's load flavour and XORs them into one word that reaches
/// memory only in a case that never happens (ptxas drops loads whose values are dead, asm
/// volatile or not). 4 loads a thread in flight.
__device__ __forceinline__ uint32_t warm_share(const uint4* p, int64_t n16, int64_t first,
                                               int64_t stride) {
  uint32_t x = 0;
  for (int64_t i = first; i < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t j = i + u * stride;
      v[u] = j < n16 ? ld_w(p + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  return x;
}
/// The reader's own index map with CTA b standing in for CTA (b + shift) % grid, so shift 0
/// warms exactly the lines each reader CTA will load, on whatever SM that index lands.
__global__ void __launch_bounds__(256)
    warm_kernel(const uint4* p, int64_t n16, int shift, unsigned* sink, int* smid_of, Span* span) {
  span_begin(span);
  const int b = (blockIdx.x + shift) % gridDim.x;
  const uint32_t x =
      warm_share(p, n16, (int64_t)b * blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x);
  if (x == 0x9e3779b9u) atomicAdd(sink, 1u);
  if (threadIdx.x == 0 && smid_of) {
    int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    smid_of[blockIdx.x] = sm;
  }
  span_end(span);
}

/// Warming by cp.async into a per-thread 16-byte shared slot, drained before exit. MODE 0:
/// cp.async.cg; 1: cp.async.ca; 2: cp.async.cg with an L2 evict_last policy.
template <int MODE>
__global__ void __launch_bounds__(256) warm_cp_kernel(const uint4* p, int64_t n16, Span* span) {
  __shared__ uint4 slot[256];
  span_begin(span);
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(slot + threadIdx.x);
  uint64_t policy = 0;
  if (MODE == 2) asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (MODE == 0)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(p + i) : "memory");
    else if (MODE == 1)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(s), "l"(p + i) : "memory");
    else
      asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(s),
                   "l"(p + i), "l"(policy)
                   : "memory");
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  span_end(span);
}

/// cp.async.bulk.prefetch.L2 of [p, p + bytes) in 4 KiB pieces, one per lane of warp 0 of each
/// CTA at a time (as w4_gemv3's prefetch_l2_share did before §26). CTAs below skip_ctas do not
/// prefetch.
__global__ void bulk_prefetch_kernel(const char* p, int64_t bytes, int skip_ctas, Span* span) {
  span_begin(span);
  if (threadIdx.x < 32 && (int)blockIdx.x >= skip_ctas) {
    const int64_t pieces = bytes / 4096, nb = gridDim.x - skip_ctas;
    for (int64_t i = (blockIdx.x - skip_ctas) + nb * threadIdx.x; i < pieces; i += nb * 32)
      bulk_prefetch_4k(p + i * 4096);
  }
  span_end(span);
}

/// prefetch.global.L2 of each 128-byte line, every thread of every CTA.
__global__ void line_prefetch_kernel(const char* p, int64_t bytes, Span* span) {
  span_begin(span);
  const int64_t lines = bytes / 128, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < lines; i += stride) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i * 128));
  }
  span_end(span);
}

/// CTAs [0, 32): a dependent chain of global loads through a small table (~`steps` L2 round
/// trips, the shape of decode attention's latency); CTAs [32, grid): bulk prefetch of the range
/// (mode 1) or nothing (mode 0). Span = the whole grid.
__global__ void overlap_kernel(const int* chain, int steps, const char* p, int64_t bytes, int mode,
                               unsigned* sink, Span* span, Span* lat_span) {
  span_begin(span);
  if (blockIdx.x < 32) {
    if (threadIdx.x == 0) {
      atomicMin(&lat_span->t0, gtimer());
      int j = blockIdx.x;
      for (int s = 0; s < steps; ++s) j = __ldcg(chain + j);
      if (j == -12345) atomicAdd(sink, 1u);
      atomicMax(&lat_span->t1, gtimer());
    }
  } else if (mode == 2) {
    const uint32_t x = warm_share(reinterpret_cast<const uint4*>(p), bytes / 16,
                                  (int64_t)(blockIdx.x - 32) * blockDim.x + threadIdx.x,
                                  (int64_t)(gridDim.x - 32) * blockDim.x);
    if (x == 0x9e3779b9u) atomicAdd(sink, 1u);
  } else if (mode == 1 && threadIdx.x < 32) {
    const int64_t pieces = bytes / 4096, nb = gridDim.x - 32;
    for (int64_t i = (blockIdx.x - 32) + nb * threadIdx.x; i < pieces; i += nb * 32)
      bulk_prefetch_4k(p + i * 4096);
  }
  span_end(span);
}

__global__ void fill_kernel(uint4* w, int64_t n16, uint32_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u + seed;
    w[i] = make_uint4(h, h ^ 0x5bd1e995u, h + 7u, h * 3u + 1u);
  }
}

struct Probe {
  int sms = 0;
  Span* span = nullptr;
  unsigned* sink = nullptr;

  void reset() {
    Span s{~0ull, 0ull};
    CK(cudaMemcpy(span, &s, sizeof s, cudaMemcpyHostToDevice));
  }
  double read_ns() {
    Span s;
    CK(cudaMemcpy(&s, span, sizeof s, cudaMemcpyDeviceToHost));
    return (double)(s.t1 - s.t0);
  }
  double read(const uint4* w, int64_t bytes, bool cs = false) {
    reset();
    if (cs)
      read_kernel<true><<<2 * sms, 256>>>(w, bytes / 16, sink, span);
    else
      read_kernel<false><<<2 * sms, 256>>>(w, bytes / 16, sink, span);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return read_ns();
  }
};

struct Stat {
  double med, min;
};
Stat stat(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front()};
}

void print(const char* state, int64_t bytes, const std::vector<double>& ns) {
  const Stat s = stat(ns);
  std::printf("%-26s %6.1f MiB  median %8.0f ns  min %8.0f ns  %7.0f GB/s (median)\n", state,
              bytes / 1048576.0, s.med, s.min, bytes / s.med);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  if (reps < 1 || reps > 1000) {
    std::fprintf(stderr, "l2_prefetch_probe: error: reps must be 1..1000, got '%s'\n", argv[1]);
    return 1;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %d bytes, persisting L2 max %d bytes\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize, prop.persistingL2CacheMaxSize);
  Probe pr;
  pr.sms = prop.multiProcessorCount;
  CK(cudaMalloc(&pr.span, sizeof(Span)));
  CK(cudaMalloc(&pr.sink, sizeof(unsigned)));
  const int64_t flush_bytes = 8 * (int64_t)prop.l2CacheSize;
  const int64_t max_bytes = 48ll << 20;
  uint4 *flush = nullptr, *w = nullptr;
  int* chain = nullptr;
  Span* lat = nullptr;
  CK(cudaMalloc(&lat, sizeof(Span)));
  int *smid_w = nullptr, *smid_r = nullptr;
  CK(cudaMalloc(&smid_w, 2 * pr.sms * sizeof(int)));
  CK(cudaMalloc(&smid_r, 2 * pr.sms * sizeof(int)));
  CK(cudaMemcpyToSymbol(g_smid_of, &smid_r, sizeof smid_r));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&w, max_bytes));
  CK(cudaMalloc(&chain, 4096 * sizeof(int)));
  fill_kernel<<<1024, 256>>>(flush, flush_bytes / 16, 1u);
  fill_kernel<<<1024, 256>>>(w, max_bytes / 16, 2u);
  {
    std::vector<int> h(4096);
    for (int i = 0; i < 4096; ++i) h[i] = (i * 97 + 13) % 4096;
    CK(cudaMemcpy(chain, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
  }
  CK(cudaDeviceSynchronize());
  auto flush_l2 = [&] { pr.read(flush, flush_bytes); };
  const char* wc = reinterpret_cast<const char*>(w);

  {
    std::vector<double> ns;
    for (int r = 0; r < 5; ++r) ns.push_back(pr.read(flush, flush_bytes));
    print("flush read (DRAM rate)", flush_bytes, ns);
  }
  for (int64_t mib : {8, 16, 24, 32}) {
    const int64_t bytes = mib << 20;
    std::vector<double> cold, hot, hot_cs, cold_cs, bulk, bulk_k, bulk_map, line, line_k, warm[3],
        warm_k[3], warm_cs, warm_cp[3], warm_cp_k[3], sm_same, ovl[3], ovl_k[3], ovl_lat[3];
    for (int r = 0; r < reps; ++r) {
      flush_l2();
      cold.push_back(pr.read(w, bytes));
      hot.push_back(pr.read(w, bytes));
      flush_l2();
      cold_cs.push_back(pr.read(w, bytes, true));
      hot_cs.push_back(pr.read(w, bytes, true));

      flush_l2();
      pr.reset();
      bulk_prefetch_kernel<<<pr.sms, 128>>>(wc, bytes, 0, pr.span);
      CK(cudaDeviceSynchronize());
      bulk_k.push_back(pr.read_ns());
      bulk.push_back(pr.read(w, bytes));

      flush_l2();
      pr.reset();
      bulk_prefetch_kernel<<<2 * pr.sms, 128>>>(wc, bytes, 0, pr.span);
      CK(cudaDeviceSynchronize());
      bulk_map.push_back(pr.read(w, bytes));

      flush_l2();
      pr.reset();
      line_prefetch_kernel<<<2 * pr.sms, 256>>>(wc, bytes, pr.span);
      CK(cudaDeviceSynchronize());
      line_k.push_back(pr.read_ns());
      line.push_back(pr.read(w, bytes));

      for (int sh = 0; sh < 3; ++sh) {
        const int shift = sh == 0 ? 0 : sh == 1 ? 1 : pr.sms;
        flush_l2();
        pr.reset();
        warm_kernel<<<2 * pr.sms, 256>>>(w, bytes / 16, shift, pr.sink, smid_w, pr.span);
        CK(cudaDeviceSynchronize());
        warm_k[sh].push_back(pr.read_ns());
        warm[sh].push_back(pr.read(w, bytes));
        if (sh == 0) {
          std::vector<int> a(2 * pr.sms), b(2 * pr.sms);
          CK(cudaMemcpy(a.data(), smid_w, a.size() * sizeof(int), cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(b.data(), smid_r, b.size() * sizeof(int), cudaMemcpyDeviceToHost));
          int same = 0;
          for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
          sm_same.push_back(same);
        }
      }
      flush_l2();
      pr.reset();
      warm_kernel<<<2 * pr.sms, 256>>>(w, bytes / 16, 0, pr.sink, nullptr, pr.span);
      CK(cudaDeviceSynchronize());
      warm_cs.push_back(pr.read(w, bytes, true));

      for (int m = 0; m < 3; ++m) {
        flush_l2();
        pr.reset();
        if (m == 0) warm_cp_kernel<0><<<2 * pr.sms, 256>>>(w, bytes / 16, pr.span);
        if (m == 1) warm_cp_kernel<1><<<2 * pr.sms, 256>>>(w, bytes / 16, pr.span);
        if (m == 2) warm_cp_kernel<2><<<2 * pr.sms, 256>>>(w, bytes / 16, pr.span);
        CK(cudaDeviceSynchronize());
        warm_cp_k[m].push_back(pr.read_ns());
        warm_cp[m].push_back(pr.read(w, bytes));
      }

      // The decode shape: a latency-bound kernel on 32 SMs (a chain of dependent DRAM loads, as
      // decode attention) while the other CTAs idle (mode 0), bulk-prefetch (1) or warm the
      // range with plain loads (2); then the read.
      for (int mode = 0; mode < 3; ++mode) {
        flush_l2();
        pr.reset();
        {
          Span s{~0ull, 0ull};
          CK(cudaMemcpy(lat, &s, sizeof s, cudaMemcpyHostToDevice));
        }
        overlap_kernel<<<2 * pr.sms, 256>>>(chain, 24, wc, bytes, mode, pr.sink, pr.span, lat);
        CK(cudaDeviceSynchronize());
        ovl_k[mode].push_back(pr.read_ns());
        Span ls;
        CK(cudaMemcpy(&ls, lat, sizeof ls, cudaMemcpyDeviceToHost));
        ovl_lat[mode].push_back((double)(ls.t1 - ls.t0));
        ovl[mode].push_back(pr.read(w, bytes));
      }
    }
    print("cold read", bytes, cold);
    print("hot read (same read before)", bytes, hot);
    print("cold read, ld.cs", bytes, cold_cs);
    print("hot read, ld.cs", bytes, hot_cs);
    print("  bulk prefetch kernel", bytes, bulk_k);
    print("read after bulk prefetch", bytes, bulk);
    print("read after bulk, reader map", bytes, bulk_map);
    print("  line prefetch kernel", bytes, line_k);
    print("read after line prefetch", bytes, line);
    const char* wn[3] = {"same CTA map", "CTA map shifted 1", "CTA map shifted #SMs"};
    for (int sh = 0; sh < 3; ++sh) {
      char b1[64], b2[64];
      std::snprintf(b1, sizeof b1, "  warm kernel, %s", wn[sh]);
      std::snprintf(b2, sizeof b2, "read after warm, %s", wn[sh]);
      print(b1, bytes, warm_k[sh]);
      print(b2, bytes, warm[sh]);
    }
    std::printf("%-26s %d of %d CTAs on the same SM (median)\n", "warm vs read CTA->SM",
                (int)stat(sm_same).med, 2 * pr.sms);
    print("ld.cs read after warm", bytes, warm_cs);
    const char* cpn[3] = {"cp.async.cg", "cp.async.ca", "cp.async.cg evict_last"};
    for (int m = 0; m < 3; ++m) {
      char b1[64], b2[64];
      std::snprintf(b1, sizeof b1, "  warm kernel, %s", cpn[m]);
      std::snprintf(b2, sizeof b2, "read after %s", cpn[m]);
      print(b1, bytes, warm_cp_k[m]);
      print(b2, bytes, warm_cp[m]);
    }
    const char* names[3] = {"idle", "bulk prefetch", "warm loads"};
    for (int m = 0; m < 3; ++m) {
      char b1[64], b2[64], b3[64];
      std::snprintf(b1, sizeof b1, "  latency chain, %s", names[m]);
      std::snprintf(b2, sizeof b2, "  grid, others %s", names[m]);
      std::snprintf(b3, sizeof b3, "read after others %s", names[m]);
      print(b1, bytes, ovl_lat[m]);
      print(b2, bytes, ovl_k[m]);
      print(b3, bytes, ovl[m]);
    }
    std::printf("\n");
  }
  return 0;
}
