// The CPU emulator of CUDA kernels shared by tests/cuda/*_emulation_test.cpp: a kernel's C++
// source is compiled by the host compiler unchanged and only the device builtins are supplied:
//  * every CUDA thread of a CTA is a fiber (ucontext), up to 512 per CTA, one CTA at a time;
//  * __syncthreads is a CTA barrier, and the warp-collective ops (shfl, mma.sync; ldmatrix in the
//    attention emulator) are emulated from the PTX ISA's documented fragment layouts: each lane
//    posts its operands, waits for its warp, then computes its own result from all 32 lanes';
//  * cp.async copies either at issue ("immediate") or only at the issuing thread's
//    cp.async.wait_group ("deferred"); shared memory starts NaN-poisoned for every CTA; the
//    global addresses a kernel reads through the emulated loads are range-checked against the
//    buffers the test registered (g_ranges), and reads of what the previous kernel writes
//    (g_pdl_hidden) before the thread's pdl_wait() fail the run.
// Include it first in exactly one translation unit (it defines the emulator's globals).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

// ---- device qualifiers as plain C++
#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#undef __restrict__
#undef __grid_constant__
#define __grid_constant__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

#define PERFX_CUDA_EMULATION 1

// CUDA built-in variables: the scheduler sets threadIdx before resuming a fiber.
uint3 threadIdx, blockIdx;
dim3 gridDim, blockDim;

namespace perfx::cuda::attn_detail {
// The kernels' `extern __shared__ unsigned char smem_raw[]` binds to this (one CTA at a time).
alignas(128) unsigned char smem_raw[128 * 1024];
}  // namespace perfx::cuda::attn_detail

namespace emu {

[[noreturn]] void die(const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "EMULATOR ERROR (block %u,%u,%u thread %u): %s\n", blockIdx.x, blockIdx.y,
               blockIdx.z, threadIdx.x, msg.c_str());
  std::abort();
}

constexpr int kMaxThreads = 512;
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kSmemBytes = 128 * 1024;

unsigned char* const g_smem = perfx::cuda::attn_detail::smem_raw;
static_assert(sizeof(perfx::cuda::attn_detail::smem_raw) == kSmemBytes, "smem size");

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  bool done = false;
};

ucontext_t g_sched;
Fiber g_fibers[kMaxThreads];
int g_cur = -1;
std::function<void()> g_body;
uint64_t g_events = 0;  // barrier arrivals + fiber completions (deadlock detection)
bool g_deferred = false;
size_t g_smem_limit = 0;  // the CTA's dynamic smem bytes

inline unsigned tid() {
  return static_cast<unsigned>(g_cur);
}
inline unsigned lane() {
  return tid() & 31u;
}
inline unsigned warp() {
  return tid() >> 5;
}

inline void yield() {
  swapcontext(&g_fibers[g_cur].ctx, &g_sched);
}

struct Barrier {
  int size = 0, count = 0;
  uint64_t gen = 0;
  void wait() {
    const uint64_t g = gen;
    ++g_events;
    if (++count == size) {
      count = 0;
      ++gen;
      return;
    }
    while (gen == g) yield();
  }
};

Barrier g_cta_bar;
Barrier g_warp_bar[kMaxThreads / 32];

// Warp exchange slots, double-buffered by op parity (one barrier per collective op suffices: a
// lane can only reuse a slot after every lane of its warp has passed the next op's barrier).
struct Slot {
  uint64_t v[4];
};
Slot g_xchg[kMaxThreads / 32][2][32];
int g_parity[kMaxThreads];

template <typename F>
void collective(const Slot& mine, F&& compute) {
  const unsigned w = warp(), l = lane();
  const int p = g_parity[tid()];
  g_xchg[w][p][l] = mine;
  g_warp_bar[w].wait();
  compute(g_xchg[w][p]);
  g_parity[tid()] ^= 1;
}

// Pending cp.async copies of each thread.
struct Copy {
  void* dst;
  const void* src;
  int bytes;           // 0 (zero-fill) or size
  int size = 16;       // the cp.async's cp-size: 16 or 8
  bool taken = false;  // g_snapshot: the source bytes were read at issue, into data
  unsigned char data[16] = {};
};
// Deferred copies read their source at issue and land at the wait (g_snapshot), or do both at the
// wait: the two orders a source written by the CTA itself after the issue can expose.
bool g_snapshot = false;
std::vector<std::vector<Copy>> g_groups[kMaxThreads];  // committed, oldest first
// Emulated mbarriers (keyed by address) and the bulk copies that complete on them.
struct BulkCopy {
  void* dst;
  const void* src;
  unsigned bytes;
  std::vector<unsigned char> data;  // g_snapshot: the source bytes read at issue
};
struct MBar {
  int count = 0;          // arrivals a phase
  uint64_t init_gen = 0;  // g_cta_bar's generation at the init
  unsigned init_tid = 0;
  int arrived = 0;
  int64_t tx = 0;  // bytes announced minus bytes issued
  bool done = false;
  int issued = 0;                // bulk copies issued on it
  std::vector<BulkCopy> copies;  // deferred: land when the phase completes
};
std::map<const void*, MBar> g_mbars;
std::vector<Copy> g_open[kMaxThreads];  // issued, not yet committed

inline void do_copy(const Copy& c) {
  if (c.bytes != 0)
    std::memcpy(c.dst, c.taken ? c.data : c.src, (size_t)c.size);
  else
    std::memset(c.dst, 0, (size_t)c.size);
}

// Global buffers the kernels may read through cp.async / __ldg (registered by the driver).
struct Range {
  const char* lo;
  size_t n;
};
std::vector<Range> g_ranges;
// What the kernel launched just before (RoPE + KV store) writes: q and the new tokens' cache rows
// and scale records. Under PDL a thread may read them only after its pdl_wait().
std::vector<Range> g_pdl_hidden;
bool g_waited[kMaxThreads];

/// Fails a read of [p, p + n) that overlaps g_pdl_hidden before this thread's pdl_wait().
void check_after_wait(const void* p, size_t n, const char* what) {
  const char* c = static_cast<const char*>(p);
  if (!g_waited[tid()])
    for (const Range& r : g_pdl_hidden)
      if (c < r.lo + r.n && r.lo < c + n)
        die(std::string(what) + ": reads what the previous kernel writes before pdl_wait()");
}

void check_global(const void* p, size_t n, const char* what, bool reads = true) {
  const char* c = static_cast<const char*>(p);
  if (reads) check_after_wait(p, n, what);
  for (const Range& r : g_ranges)
    if (c >= r.lo && c + n <= r.lo + r.n) return;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s: global address %p (+%zu bytes) is outside every buffer", what,
                p, n);
  die(buf);
}

void check_smem(const void* p, size_t n, const char* what) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  if (c < g_smem || c + n > g_smem + g_smem_limit) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s: smem offset %td (+%zu) outside [0, %zu)", what, c - g_smem,
                  n, g_smem_limit);
    die(buf);
  }
  const size_t align = n < 16 ? n : 16;  // a copy's own size (8-byte cp.async), else 16
  if (reinterpret_cast<uintptr_t>(p) % align)
    die(std::string(what) + ": not " + std::to_string(align) + "-byte aligned");
}

void fiber_entry() {
  g_body();
  g_fibers[g_cur].done = true;
  ++g_events;
}

void run_block(int nthreads, const std::function<void()>& body) {
  g_body = body;
  std::memset(g_smem, 0xFF, kSmemBytes);  // NaN-poison shared memory for every CTA
  g_cta_bar = Barrier{nthreads, 0, 0};
  g_mbars.clear();
  for (int w = 0; w < kMaxThreads / 32; ++w) g_warp_bar[w] = Barrier{32, 0, 0};
  for (int i = 0; i < nthreads; ++i) {
    Fiber& f = g_fibers[i];
    if (f.stack.empty()) f.stack.resize(kStackBytes);
    f.done = false;
    g_parity[i] = 0;
    g_waited[i] = false;
    g_groups[i].clear();
    g_open[i].clear();
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &g_sched;
    makecontext(&f.ctx, fiber_entry, 0);
  }
  for (;;) {
    bool any = false;
    const uint64_t ev0 = g_events;
    for (int i = 0; i < nthreads; ++i) {
      if (g_fibers[i].done) continue;
      any = true;
      g_cur = i;
      threadIdx = make_uint3(static_cast<unsigned>(i), 0, 0);
      swapcontext(&g_sched, &g_fibers[i].ctx);
    }
    g_cur = -1;
    if (!any) break;
    if (g_events == ev0) die("deadlock: threads wait at barriers that can never complete");
  }
  for (int i = 0; i < nthreads; ++i)
    if (!g_groups[i].empty() || !g_open[i].empty()) die("a thread exited with cp.async pending");
  for (const auto& [bar, m] : g_mbars)
    if (m.issued > 0 && !m.done) die("a CTA exited with bulk copies nobody waited for");
  if (std::none_of(g_waited, g_waited + nthreads, [](bool w) { return w; }))
    die("a CTA exited without pdl_wait() (pdl.cuh: the wait keeps the launch chain ordered)");
}

template <typename T>
float bits_to_float(uint16_t h);
template <>
float bits_to_float<__half>(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
template <>
float bits_to_float<__nv_bfloat16>(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace emu

void perfx_emu_pdl_wait() {
  emu::g_waited[emu::tid()] = true;
}
void perfx_emu_check_read(const void* p, size_t n) {
  emu::check_after_wait(p, n, "load");
}

// ---- CUDA builtins used by the kernels
inline void __syncthreads() {
  emu::g_cta_bar.wait();
}

inline float __shfl_xor_sync(unsigned mask, float v, int m) {
  if (mask != 0xffffffffu) emu::die("shfl with a partial mask");
  emu::Slot s{};
  std::memcpy(&s.v[0], &v, 4);
  float r = 0.f;
  emu::collective(s, [&](const emu::Slot* all) { std::memcpy(&r, &all[emu::lane() ^ m].v[0], 4); });
  return r;
}

template <typename T>
inline T __ldg(const T* p) {
  emu::check_global(p, sizeof(T), "__ldg");
  return *p;
}

// The kernels' split counters: CTAs run one at a time, so an atomic is a plain read-modify-write
// and a fence orders nothing more. __ldcg reads the split partials, which start NaN in every case
// and are never NaN once written: a NaN read is a merge that ran before every split had written.
inline float __ldcg(const float* p) {
  if (std::isnan(*p))
    emu::die(
        "__ldcg: a split partial is NaN: read before its CTA wrote it (or computed from a "
        "poisoned K/V row)");
  return *p;
}
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
inline void __threadfence() {}
[[noreturn]] inline void __trap() {
  emu::die("__trap()");
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) emu::die("__syncwarp with a partial mask");
  emu::g_warp_bar[emu::warp()].wait();
}

inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}

// ---- emulated memory primitives of pdl.cuh and linear_frag.cuh (PERFX_CUDA_EMULATION)
/// A checked plain global load (ld_act, ld_weight_nc): in a registered buffer, and not of the
/// previous kernel's output before this thread's pdl_wait().
void perfx_emu_check_global(const void* p, size_t n) {
  emu::check_global(p, n, "load");
}
/// The CTA's dynamic shared memory (linear_internal.cuh's dyn_smem).
void* perfx_emu_dyn_smem() {
  return emu::g_smem;
}

/// mma.sync.m16n8k16.row.col f32 += T x T (PTX ISA fragment layout for .f16/.bf16, lane = 4g+t):
/// A[row][k] is in lane (row%8)*4 + (k%8)/2, register (row>=8) + 2*(k>=8), half k%2;
/// B[k][n]   is in lane n*4 + (k%8)/2, register (k>=8), half k%2;
/// D[row][n] for lane 4g+t: d0,d1 = (g, 2t..2t+1), d2,d3 = (g+8, 2t..2t+1).
/// The sum runs in fp32, k ascending (the hardware's internal order is unspecified: kernels are
/// checked bit for bit only against other emulated kernels, else within a tolerance).
template <typename T>
inline void emu_mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  emu::Slot s{};
  s.v[0] = a[0] | static_cast<uint64_t>(a[1]) << 32;
  s.v[1] = a[2] | static_cast<uint64_t>(a[3]) << 32;
  s.v[2] = b0 | static_cast<uint64_t>(b1) << 32;
  emu::collective(s, [&](const emu::Slot* all) {
    auto reg = [&](int src, int r) -> uint32_t {  // A regs 0..3, B regs 4..5
      const uint64_t w = all[src].v[r / 2];
      return static_cast<uint32_t>((r & 1) ? w >> 32 : w);
    };
    auto half = [](uint32_t r, int hi) {
      return static_cast<uint16_t>(hi ? r >> 16 : r & 0xffffu);
    };
    auto A = [&](int row, int k) {
      return emu::bits_to_float<T>(
          half(reg((row % 8) * 4 + (k % 8) / 2, (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)), k & 1));
    };
    auto B = [&](int k, int n) {
      return emu::bits_to_float<T>(half(reg(n * 4 + (k % 8) / 2, 4 + (k >= 8 ? 1 : 0)), k & 1));
    };
    const int g = static_cast<int>(emu::lane()) >> 2, t = static_cast<int>(emu::lane()) & 3;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
      float acc = d[e];
      for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
      d[e] = acc;
    }
  });
}
void perfx_emu_mma16816(bool bf16, float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if (bf16)
    emu_mma16816<__nv_bfloat16>(d, a, b0, b1);
  else
    emu_mma16816<__half>(d, a, b0, b1);
}
