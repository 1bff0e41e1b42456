// Standalone test + benchmark of the CUDA attention kernels (paged_attention: split-KV decode and
// prefill) and the fused RoPE/norm/KV-store kernel, against fp64 host references.
//
// Build (from the repo root; tools/device/cuda_attention_kernels.sh does this):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc
//     tests/cuda/attention_kernels_test.cu src/backend/cuda/attention_decode.cu
//     src/backend/cuda/attention_prefill.cu src/backend/cuda/rope_kv.cu -o attention_kernels_test
// Run: ./attention_kernels_test            all correctness tests (exit 1 if any fails); "fused"
//                                          cases: RoPE fused into split-KV against the two kernels
//      ./attention_kernels_test --quick    a few small cases (for compute-sanitizer)
//      ./attention_kernels_test --bench    timings (decode GB/s, prefill TFLOP/s, rope GB/s)
//      --filter SUBSTR runs only cases whose name contains SUBSTR.
//
// Every attention case: random q/k/v in T (never zeros), K/V pool poisoned with NaN outside the
// sequences' keys, physical blocks shuffled with unused holes, -1 block-table entries past each
// sequence, out poisoned with NaN (0xFFFF) including a padding gap per row that must stay
// untouched. Each path runs twice (bitwise-equal results required: a moving result is a race).
// Tolerances: fp16 rel-L2 <= 2e-3 and |err| <= 4e-3 per element; bf16 rel-L2 <= 1e-2 and
// |err| <= 2.5e-2 (outputs are convex combinations of V in [-1, 1]).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attn_test_common.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/rope_kv.cuh"

using namespace perfx::cuda;
using namespace attn_test;

namespace {

#define CK(expr) ATTN_CUDA_CHECK(expr)

// ---------------------------------------------------------------------------------------------
// Host helpers

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t n) : bytes(n) {
    if (n) CK(cudaMalloc(&p, n));
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
  template <typename T>
  void upload(const std::vector<T>& v) {
    if (v.empty()) return;
    if (v.size() * sizeof(T) > bytes) throw std::runtime_error("upload larger than buffer");
    CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    // The legacy-stream copy may still be in flight when cudaMemcpy returns (pageable source),
    // and the test's stream is non-blocking: finish it before any kernel reads the buffer.
    CK(cudaDeviceSynchronize());
  }
  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    if (n) CK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

// ---------------------------------------------------------------------------------------------
// Attention cases

struct DevBatch {
  DevBuf qkv, out, kpool, vpool, k8, v8, kscale, vscale, table, q_start, kv_len, ws, counters;
  int64_t ldo = 0;
  DevBatch(const AttnCase& c, const HostBatch& b)
      : qkv(b.qkv.size() * 2),
        out(static_cast<size_t>(std::max(b.n_tokens, 1)) * (c.nq * c.D + c.out_pad) * 2),
        kpool(b.kpool.size() * 2),
        vpool(b.vpool.size() * 2),
        k8(b.k8.size()),
        v8(b.v8.size()),
        kscale(b.kscale.size() * 2),
        vscale(b.vscale.size() * 2),
        table(b.table.size() * 4),
        q_start(b.q_start.size() * 4),
        kv_len(b.kv_len.size() * 4 + 4),
        ws(paged_attention_workspace_bytes(c.D)),
        counters(paged_attention_counters_bytes()),
        ldo(c.nq * c.D + c.out_pad) {
    upload(b);
    CK(cudaMemset(counters.p, 0, counters.bytes));
    CK(cudaDeviceSynchronize());
  }
  /// Every split counter back at zero (paged_attention's contract); zeroes them for the next case.
  int64_t counters_left() {
    const std::vector<int> v = counters.download<int>(counters.bytes / sizeof(int));
    int64_t n = 0;
    for (int x : v) n += x != 0;
    if (n) {
      CK(cudaMemset(counters.p, 0, counters.bytes));
      CK(cudaDeviceSynchronize());
    }
    return n;
  }
  void upload(const HostBatch& b) {
    qkv.upload(b.qkv);
    kpool.upload(b.kpool);
    vpool.upload(b.vpool);
    k8.upload(b.k8);
    v8.upload(b.v8);
    kscale.upload(b.kscale);
    vscale.upload(b.vscale);
    table.upload(b.table);
    q_start.upload(b.q_start);
    kv_len.upload(b.kv_len);
  }
};

PagedAttentionArgs make_args(const AttnCase& c, const HostBatch& b, const DevBatch& d,
                             AttnPath path, float scale) {
  PagedAttentionArgs a;
  a.early_kv = true;  // the cache and layout are written by synchronous copies before each run
  a.dtype = c.bf16 ? AttnDtype::kBF16 : AttnDtype::kF16;
  a.q = d.qkv.p;
  a.ldq = b.ldq;
  a.out = d.out.p;
  a.ldo = d.ldo;
  a.k_cache = d.kpool.p;
  a.v_cache = d.vpool.p;
  if (c.q8) {  // the int8 pools (kpool / vpool hold their dequantized values for the reference)
    a.kv_q8 = true;
    a.k_cache = d.k8.p;
    a.v_cache = d.v8.p;
    a.k_scale = d.kscale.p;
    a.v_scale = d.vscale.p;
  }
  a.n_q_heads = c.nq;
  a.n_kv_heads = c.nkv;
  a.head_dim = c.D;
  a.block_size = c.bs;
  a.kv_slots = static_cast<int64_t>(b.n_blocks) * c.bs;  // the block copies where bs allows
  a.block_tables = d.table.as<int32_t>();
  a.max_blocks = b.max_blocks;
  a.seq_q_start = d.q_start.as<int32_t>();
  a.seq_kv_len = d.kv_len.as<int32_t>();
  a.n_seqs = b.n_seqs;
  a.n_tokens = b.n_tokens;
  a.max_q_len = c.q_bound ? c.q_bound : b.max_q;
  a.max_kv_len = c.kv_bound ? c.kv_bound : b.max_kv;
  a.scale = scale;
  a.workspace = d.ws.p;
  a.workspace_bytes = d.ws.bytes;
  a.path = path;
  return a;
}

std::vector<u16> run_once(const PagedAttentionArgs& a, const DevBatch& d, int n_tokens,
                          cudaStream_t st) {
  const size_t n_out = static_cast<size_t>(std::max(n_tokens, 1)) * d.ldo;
  CK(cudaMemsetAsync(d.out.p, 0xFF, n_out * 2, st));
  paged_attention(a, st);
  CK(cudaStreamSynchronize(st));
  CK(cudaGetLastError());
  return d.out.download<u16>(n_out);
}

/// Counts a failure if a call left a split counter non-zero.
void check_counters(DevBatch& d, const std::string& what) {
  const int64_t n = d.counters_left();
  if (n == 0) return;
  ++g_cases;
  ++g_failures;
  std::printf("[FAIL] %s: %lld split counters left non-zero\n", what.c_str(), (long long)n);
}

void run_attention_case(const AttnCase& c, uint64_t seed, cudaStream_t st) {
  const HostBatch b = make_batch(c, seed);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.D));
  const std::vector<double> ref = ref_attention(c, b, scale);
  DevBatch d(c, b);
  // kAuto with split counters (the last CTA merges) and with the reduce kernel; prefill-only.
  for (int run = 0; run < 3; ++run) {
    const AttnPath path = run < 2 ? AttnPath::kAuto : AttnPath::kPrefillOnly;
    PagedAttentionArgs a = make_args(c, b, d, path, scale);
    if (run == 0) a.split_counters = d.counters.as<int>();
    PagedAttentionPlan plan;
    std::vector<u16> o1, o2;
    try {
      plan = paged_attention_plan(a);
      o1 = run_once(a, d, b.n_tokens, st);
      o2 = run_once(a, d, b.n_tokens, st);
    } catch (const std::exception& e) {
      ++g_cases;
      ++g_failures;
      std::printf("[FAIL] attn %s %s: exception: %s\n", c.name.c_str(), path_name(path), e.what());
      CK(cudaDeviceSynchronize());
      continue;
    }
    check_counters(d, "attn " + c.name);
    check_and_report(run == 0 ? "attn/merge" : "attn", c, b, path, plan, o1, o2, d.ldo, ref);
  }
}

/// CUDA-graph replay as the engine's decode uses it: captured once with a bucketed max_kv_len,
/// replayed over two batches (same shapes, different lengths and tables written to the same device
/// buffers between replays).
void run_graph_case(const AttnCase& c, const std::vector<SeqSpec>& second, uint64_t seed,
                    cudaStream_t st) {
  AttnCase c2 = c;
  c2.seqs = second;
  // Capacities covering both batches.
  auto need = [&](const AttnCase& x, int* blocks, int* max_nb) {
    *blocks = 0;
    *max_nb = 0;
    for (const auto& s : x.seqs) {
      const int nb = (s.ctx + s.q_len + x.bs - 1) / x.bs;
      *blocks += nb;
      *max_nb = std::max(*max_nb, nb);
    }
  };
  int b1, m1, b2, m2;
  need(c, &b1, &m1);
  need(c2, &b2, &m2);
  const int cap_blocks = std::max(b1, b2) + 7, cap_max = std::max(m1, m2) + 2;
  const HostBatch batches[2] = {make_batch(c, seed, cap_blocks, cap_max),
                                make_batch(c2, seed + 1, cap_blocks, cap_max)};
  if (batches[0].n_tokens != batches[1].n_tokens) throw std::runtime_error("graph case shapes");
  const float scale = 1.f / std::sqrt(static_cast<float>(c.D));
  DevBatch d(c, batches[0]);
  PagedAttentionArgs a = make_args(c, batches[0], d, AttnPath::kAuto, scale);
  a.split_counters = d.counters.as<int>();  // as the engine's steps: the last CTA merges
  a.max_kv_len = c.kv_bound;                // the bucket, >= both batches' lengths
  a.max_q_len = c.q_bound ? c.q_bound : std::max(batches[0].max_q, batches[1].max_q);
  PagedAttentionPlan plan;
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  try {
    paged_attention_init();
    plan = paged_attention_plan(a);
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    paged_attention(a, st);
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
  } catch (const std::exception& e) {
    ++g_cases;
    ++g_failures;
    std::printf("[FAIL] graph %s: capture failed: %s\n", c.name.c_str(), e.what());
    cudaGraph_t g2 = nullptr;
    cudaStreamEndCapture(st, &g2);
    if (g2) cudaGraphDestroy(g2);
    cudaGetLastError();
    return;
  }
  const size_t n_out = static_cast<size_t>(std::max(batches[0].n_tokens, 1)) * d.ldo;
  for (int k = 0; k < 2; ++k) {
    const HostBatch& b = batches[k];
    const AttnCase& cc = k == 0 ? c : c2;
    d.upload(b);
    const std::vector<double> ref = ref_attention(cc, b, scale);
    std::vector<u16> outs[2];
    for (int rep = 0; rep < 2; ++rep) {
      CK(cudaMemsetAsync(d.out.p, 0xFF, n_out * 2, st));
      CK(cudaGraphLaunch(exec, st));
      CK(cudaStreamSynchronize(st));
      outs[rep] = d.out.download<u16>(n_out);
    }
    AttnCase shown = cc;
    shown.kv_bound = c.kv_bound;
    shown.name = c.name + (k == 0 ? " [replay batch A]" : " [replay batch B]");
    check_and_report("graph", shown, b, AttnPath::kAuto, plan, outs[0], outs[1], d.ldo, ref);
  }
  check_counters(d, "graph " + c.name);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

/// RoPE + KV store fused into the split-KV kernel (PagedAttentionArgs::rope) against the two
/// kernels it replaces on the same batch (new tokens' cache rows poisoned): out and every byte of
/// the cache must agree bit for bit.
void run_fused_case(const AttnCase& c, uint64_t seed, cudaStream_t st) {
  HostBatch b = make_batch(c, seed);
  if (!fused_rope_applies(c, b)) return;
  poison_new_rows(c, b);
  const FusedRope f = make_fused_rope(c, b, seed + 77);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.D));
  DevBatch d(c, b);
  DevBuf raw(f.d.qkv.size() * 2), pos(f.d.pos.size() * 4), slots(f.d.slots.size() * 4),
      inv(std::max<size_t>(f.d.inv_freq.size(), 1) * 4), qw(f.d.qw.size() * 4),
      kw(f.d.kw.size() * 4);
  pos.upload(f.d.pos);
  slots.upload(f.d.slots);
  inv.upload(f.d.inv_freq);
  qw.upload(f.d.qw);
  kw.upload(f.d.kw);
  FusedOutcome res[2];
  try {
    for (int fused = 0; fused < 2; ++fused) {
      d.upload(b);
      raw.upload(f.d.qkv);
      PagedAttentionArgs a = make_args(c, b, d, AttnPath::kAuto, scale);
      a.q = raw.p;
      a.ldq = f.d.ld;
      const AttnRopeArgs rr =
          fused_rope_args(f, raw.p, inv.as<float>(), qw.as<float>(), kw.as<float>());
      // The fused run with split counters (last-CTA merge), the unfused pair with the reduce
      // kernel: the bitwise comparison covers the merge too.
      if (fused) {
        a.rope = &rr;
        a.split_counters = d.counters.as<int>();
      } else {
        RopeKvArgs ra = rope_args(f.rc, f.d, raw.p, c.q8 ? d.k8.p : d.kpool.p,
                                  c.q8 ? d.v8.p : d.vpool.p, pos.as<int32_t>(), slots.as<int32_t>(),
                                  inv.as<float>(), qw.as<float>(), kw.as<float>());
        if (c.q8) {
          ra.kv_q8 = true;
          ra.k_scale = d.kscale.p;
          ra.v_scale = d.vscale.p;
        }
        rope_norm_kv_store(ra, st);
      }
      FusedOutcome& r = res[fused];
      r.out = run_once(a, d, b.n_tokens, st);
      check_counters(d, "fused " + c.name);
      r.kpool = d.kpool.download<u16>(b.kpool.size());
      r.vpool = d.vpool.download<u16>(b.vpool.size());
      r.k8 = d.k8.download<int8_t>(b.k8.size());
      r.v8 = d.v8.download<int8_t>(b.v8.size());
      r.kscale = d.kscale.download<u16>(b.kscale.size());
      r.vscale = d.vscale.download<u16>(b.vscale.size());
    }
  } catch (const std::exception& e) {
    ++g_cases;
    ++g_failures;
    std::printf("[FAIL] fused %s: exception: %s\n", c.name.c_str(), e.what());
    CK(cudaDeviceSynchronize());
    return;
  }
  check_fused("fused", c, f, res[0], res[1]);
}

// ---------------------------------------------------------------------------------------------
// RoPE / norm / KV store

/// Device run of one RoPE case: upload, rope_norm_kv_store, download, shared host check.
void run_rope_case(const RopeCase& c, uint64_t seed, cudaStream_t st) {
  const RopeData h = make_rope_data(c, seed);
  DevBuf d_qkv(h.qkv.size() * 2), d_kc(h.n_slots * h.vec * 2), d_vc(h.n_slots * h.vec * 2),
      d_pos(h.pos.size() * 4), d_slots(h.slots.size() * 4),
      d_if(std::max<size_t>(h.inv_freq.size(), 1) * 4), d_qw(h.qw.size() * 4),
      d_kw(h.kw.size() * 4);
  d_qkv.upload(h.qkv);
  d_pos.upload(h.pos);
  d_slots.upload(h.slots);
  d_if.upload(h.inv_freq);
  d_qw.upload(h.qw);
  d_kw.upload(h.kw);
  CK(cudaMemset(d_kc.p, 0xFF, d_kc.bytes));
  CK(cudaMemset(d_vc.p, 0xFF, d_vc.bytes));
  CK(cudaDeviceSynchronize());  // legacy-stream memsets vs the non-blocking test stream
  const RopeKvArgs a =
      rope_args(c, h, d_qkv.p, d_kc.p, d_vc.p, d_pos.as<int32_t>(), d_slots.as<int32_t>(),
                d_if.as<float>(), d_qw.as<float>(), d_kw.as<float>());
  try {
    rope_norm_kv_store(a, st);
    CK(cudaStreamSynchronize(st));
  } catch (const std::exception& e) {
    ++g_cases;
    ++g_failures;
    std::printf("[FAIL] rope %s: exception %s\n", c.name.c_str(), e.what());
    return;
  }
  check_rope("rope", c, h, d_qkv.download<u16>(h.qkv.size()), d_kc.download<u16>(h.n_slots * h.vec),
             d_vc.download<u16>(h.n_slots * h.vec));
}

void run_cos_sin_check(cudaStream_t st) {
  const int n = 64, half = 64;
  const float af = 1.25f;
  std::vector<int32_t> pos(n);
  for (int t = 0; t < n; ++t)
    pos[t] = t < 8 ? t : static_cast<int32_t>((t * 2654435761u) % 600000u);
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / 128));
  DevBuf d_pos(n * 4), d_if(half * 4), d_c(n * half * 4), d_s(n * half * 4);
  d_pos.upload(pos);
  d_if.upload(inv_freq);
  rope_cos_sin_table(d_pos.as<int32_t>(), n, d_if.as<float>(), half, af, d_c.as<float>(),
                     d_s.as<float>(), st);
  CK(cudaStreamSynchronize(st));
  const auto cs = d_c.download<float>(n * half), sn = d_s.download<float>(n * half);
  double worst = 0;
  int wt = 0, wi = 0;
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < half; ++i) {
      const float ang = static_cast<float>(pos[t]) * inv_freq[i];
      const double e1 = std::fabs(cs[t * half + i] - std::cos(static_cast<double>(ang)) * af);
      const double e2 = std::fabs(sn[t * half + i] - std::sin(static_cast<double>(ang)) * af);
      const double e = std::max(e1, e2) / af;
      if (!(e <= worst)) worst = e, wt = t, wi = i;
    }
  const bool pass = worst <= 1e-6;
  ++g_cases;
  if (!pass) ++g_failures;
  std::printf(
      "[%s] rope cos/sin table: max |err| / attention_factor = %.3g (tol 1e-6) at pos %d "
      "pair %d (angles up to %.0f rad)\n",
      pass ? "PASS" : "FAIL", worst, pos[wt], wi, 600000.0);
}

// ---------------------------------------------------------------------------------------------
// Benchmarks

__global__ void fill_random_kernel(u16* p, int64_t n, uint64_t seed, float amp, bool bf16) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (static_cast<float>(z >> 40) * (1.f / 16777216.f) * 2.f - 1.f) * amp;
    p[i] =
        bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(u)) : __half_as_ushort(__float2half_rn(u));
  }
}

void fill_random(void* p, int64_t n, uint64_t seed, float amp, bool bf16) {
  fill_random_kernel<<<1024, 256>>>(static_cast<u16*>(p), n, seed, amp, bf16);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());  // legacy stream vs the non-blocking test stream
}

struct BenchRow {
  std::string what;
  double us;
  double rate;  // GB/s or TFLOP/s
  double ceiling;
  std::string unit, extra;
};
std::vector<BenchRow> g_bench;

/// Median time (us) of one call, from graph replays of `calls` recorded calls.
double time_graph(cudaStream_t st, int calls, const std::function<void(int)>& record) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < calls; ++i) record(i);
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, st));
  std::vector<float> ms;
  for (int r = 0; r < 15; ++r) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(exec, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float x;
    CK(cudaEventElapsedTime(&x, e0, e1));
    ms.push_back(x);
  }
  CK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms[ms.size() / 2] * 1000.0 / calls;
}

constexpr double kBwCeil = 4300.0;  // GB/s, measured device copy bandwidth (H200.md / KINDS.md)
constexpr double kMmaCeil = 790.0;  // TFLOP/s, measured bf16 dense GEMM rate (KINDS.md)

struct Shape {
  const char* name;
  int nq, nkv, D;
};

/// q8: a q8_0 cache (int8 pools of random bytes, fp16 scales in [-0.01, 0.01]); its bytes count
/// the scale records (8 bytes per slot and KV head).
void bench_attention(const Shape& sh, int batch, int q_len, int ctx, bool decode, cudaStream_t st,
                     bool q8 = false) {
  const bool bf16 = true;
  const int bs = 16;
  const int kv_len = ctx + q_len;
  const int nbps = (kv_len + bs - 1) / bs;
  const int64_t total_blocks = static_cast<int64_t>(batch) * nbps;
  const int64_t pool_elems = total_blocks * bs * sh.nkv * sh.D;
  const int64_t pool_bytes = q8 ? pool_elems : pool_elems * 2;
  const int64_t scale_elems = q8 ? total_blocks * bs * sh.nkv * 4 : 0;
  const double kv_bytes =
      static_cast<double>(batch) * kv_len * sh.nkv * (q8 ? sh.D + 8.0 : sh.D * 2.0) * 2.0;
  const int copies =
      decode ? static_cast<int>(std::min<double>(16, std::max(1.0, std::ceil(512e6 / kv_bytes))))
             : 1;
  DevBuf k(pool_bytes * copies), v(pool_bytes * copies);
  fill_random(k.p, pool_bytes / 2 * copies, 1, 1.f, bf16);  // q8: random int8 bit patterns
  fill_random(v.p, pool_bytes / 2 * copies, 2, 1.f, bf16);
  DevBuf ks(scale_elems * 2 * copies), vs(scale_elems * 2 * copies);
  if (q8) {
    fill_random(ks.p, scale_elems * copies, 6, 0.01f, false);
    fill_random(vs.p, scale_elems * copies, 7, 0.01f, false);
  }
  const int64_t ldq = static_cast<int64_t>(sh.nq + 2 * sh.nkv) * sh.D;
  const int n_tokens = batch * q_len;
  DevBuf q(static_cast<size_t>(n_tokens) * ldq * 2),
      out(static_cast<size_t>(n_tokens) * sh.nq * sh.D * 2);
  fill_random(q.p, static_cast<int64_t>(n_tokens) * ldq, 3, 4.f, bf16);
  std::vector<int32_t> table(total_blocks), qs(batch + 1), kvl(batch, kv_len);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(5));
  for (int s = 0; s <= batch; ++s) qs[s] = s * q_len;
  DevBuf d_table(table.size() * 4), d_qs(qs.size() * 4), d_kvl(kvl.size() * 4),
      ws(paged_attention_workspace_bytes(sh.D));
  d_table.upload(table);
  d_qs.upload(qs);
  d_kvl.upload(kvl);
  PagedAttentionArgs a;
  a.early_kv = true;
  a.dtype = AttnDtype::kBF16;
  a.q = q.p;
  a.ldq = ldq;
  a.out = out.p;
  a.ldo = static_cast<int64_t>(sh.nq) * sh.D;
  a.n_q_heads = sh.nq;
  a.n_kv_heads = sh.nkv;
  a.head_dim = sh.D;
  a.block_size = bs;
  a.kv_slots = total_blocks * bs;
  a.block_tables = d_table.as<int32_t>();
  a.max_blocks = nbps;
  a.seq_q_start = d_qs.as<int32_t>();
  a.seq_kv_len = d_kvl.as<int32_t>();
  a.n_seqs = batch;
  a.n_tokens = n_tokens;
  a.max_q_len = q_len;
  a.max_kv_len = kv_len;
  a.scale = 1.f / std::sqrt(static_cast<float>(sh.D));
  a.workspace = ws.p;
  a.workspace_bytes = ws.bytes;
  a.maybe_short_seqs = decode;
  a.k_cache = k.p;  // both cache kinds (the q8 case alone set them once: the bench stopped at its
  a.v_cache = v.p;  // first fp16 warm-up on "null pointer")
  if (q8) {
    a.kv_q8 = true;
    a.k_scale = ks.p;
    a.v_scale = vs.p;
  }
  CK(cudaDeviceSynchronize());
  const PagedAttentionPlan plan = paged_attention_plan(a);
  paged_attention(a, st);  // warm-up outside the graph
  CK(cudaStreamSynchronize(st));
  const int calls = std::max(copies, 8);
  const double us = time_graph(st, calls, [&](int i) {
    PagedAttentionArgs b = a;
    const int cp = i % copies;
    b.k_cache = k.as<char>() + static_cast<int64_t>(cp) * pool_bytes;
    b.v_cache = v.as<char>() + static_cast<int64_t>(cp) * pool_bytes;
    if (q8) {
      b.k_scale = ks.as<u16>() + static_cast<int64_t>(cp) * scale_elems;
      b.v_scale = vs.as<u16>() + static_cast<int64_t>(cp) * scale_elems;
    }
    paged_attention(b, st);
  });
  char what[160], extra[96];
  if (decode) {
    const double bytes = kv_bytes + static_cast<double>(n_tokens) * sh.nq * sh.D * 2.0 * 2.0;
    std::snprintf(what, sizeof what, "decode %s%s b=%d kv=%d", sh.name, q8 ? " q8" : "", batch,
                  kv_len);
    std::snprintf(extra, sizeof extra, "splits=%d chunk=%d copies=%d", plan.n_splits, plan.chunk,
                  copies);
    g_bench.push_back({what, us, bytes / us * 1e-3, kBwCeil, "GB/s", extra});
  } else {
    double flops = 0;
    for (int i = 0; i < q_len; ++i) flops += 4.0 * sh.D * sh.nq * (ctx + i + 1);
    flops *= batch;
    std::snprintf(what, sizeof what, "prefill %s b=%d q=%d ctx=%d", sh.name, batch, q_len, ctx);
    std::snprintf(extra, sizeof extra, "%.2f GFLOP, %.1f MB K+V", flops * 1e-9, kv_bytes * 1e-6);
    g_bench.push_back({what, us, flops / us * 1e-6, kMmaCeil, "TFLOP/s", extra});
  }
  const BenchRow& r = g_bench.back();
  std::printf("BENCH %-44s %10.2f us %9.1f %s (%4.1f%% of %.0f) %s\n", r.what.c_str(), r.us, r.rate,
              r.unit.c_str(), 100.0 * r.rate / r.ceiling, r.ceiling, r.extra.c_str());
  std::fflush(stdout);
}

void bench_rope(int n_tokens, cudaStream_t st) {
  const int nq = 32, nkv = 32, hd = 128;
  const int64_t ld = static_cast<int64_t>(nq + 2 * nkv) * hd;
  const int64_t n_slots = static_cast<int64_t>(n_tokens) * 4;
  DevBuf qkv(n_tokens * ld * 2), kc(n_slots * nkv * hd * 2), vc(n_slots * nkv * hd * 2),
      pos(n_tokens * 4), slots(n_tokens * 4), inv(64 * 4);
  fill_random(qkv.p, n_tokens * ld, 9, 1.f, true);
  std::vector<int32_t> p(n_tokens), s(n_tokens);
  for (int t = 0; t < n_tokens; ++t) p[t] = 1000 + t, s[t] = 3 * t + 1;
  std::vector<float> f(64);
  for (int i = 0; i < 64; ++i) f[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / 128));
  pos.upload(p);
  slots.upload(s);
  inv.upload(f);
  RopeKvArgs a;
  a.dtype = AttnDtype::kBF16;
  a.q = qkv.p;
  a.ldq = ld;
  a.k = qkv.as<u16>() + nq * hd;
  a.ldk = ld;
  a.v = qkv.as<u16>() + (nq + nkv) * hd;
  a.ldv = ld;
  a.k_cache = kc.p;
  a.v_cache = vc.p;
  a.n_slots = n_slots;
  a.positions = pos.as<int32_t>();
  a.slots = slots.as<int32_t>();
  a.n_tokens = n_tokens;
  a.n_q_heads = nq;
  a.n_kv_heads = nkv;
  a.head_dim = hd;
  a.rot_dim = hd;
  a.inv_freq = inv.as<float>();
  rope_norm_kv_store(a, st);
  CK(cudaStreamSynchronize(st));
  const double us = time_graph(st, 20, [&](int) { rope_norm_kv_store(a, st); });
  const double bytes = 2.0 * n_tokens * ld * 2.0;  // read q,k,v; write q, k cache, v cache
  char what[96];
  std::snprintf(what, sizeof what, "rope+store 7B tokens=%d", n_tokens);
  g_bench.push_back({what, us, bytes / us * 1e-3, kBwCeil, "GB/s", ""});
  std::printf("BENCH %-44s %10.2f us %9.1f GB/s (%4.1f%% of %.0f)\n", what, us, bytes / us * 1e-3,
              100.0 * bytes / us * 1e-3 / kBwCeil, kBwCeil);
}

void run_bench(cudaStream_t st) {
  const Shape s7b{"7B(32/32/128)", 32, 32, 128};
  const Shape s8b{"L3-8B(32/8/128)", 32, 8, 128};
  const Shape tiny{"TinyLlama(32/4/64)", 32, 4, 64};
  for (const Shape& sh : {s7b, s8b})
    for (int b : {1, 16, 64, 256})
      for (int ctx : {512, 2048}) bench_attention(sh, b, 1, ctx - 1, true, st);
  for (const Shape& sh : {s7b, s8b})  // the q8_0 cache at serving batches
    for (int b : {64, 256})
      for (int ctx : {512, 2048}) bench_attention(sh, b, 1, ctx - 1, true, st, true);
  bench_attention(s7b, 1, 512, 0, false, st);
  bench_attention(tiny, 1, 512, 0, false, st);
  bench_attention(s7b, 1, 512, 1536, false, st);
  bench_attention(s7b, 4, 512, 0, false, st);
  bench_rope(1, st);
  bench_rope(256, st);
  bench_rope(512, st);
  std::printf(
      "\nBENCH SUMMARY (median of graph replays; ceilings: %.0f GB/s copy, %.0f TFLOP/s "
      "bf16 GEMM)\n",
      kBwCeil, kMmaCeil);
  std::printf("%-46s %10s %10s %8s  %s\n", "case", "us", "rate", "%ceil", "notes");
  for (const auto& r : g_bench)
    std::printf("%-46s %10.2f %10.1f %7.1f%%  %s %s\n", r.what.c_str(), r.us, r.rate,
                100.0 * r.rate / r.ceiling, r.unit.c_str(), r.extra.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool bench = false, quick = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--bench")
      bench = true;
    else if (s == "--quick")
      quick = true;
    else if (s == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--bench] [--filter SUBSTR]\n", argv[0]);
      return 2;
    }
  }
  try {
    cudaDeviceProp prop;
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    std::printf("device: %s, sm_%d%d, %d SMs, %.0f MB L2\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.l2CacheSize / 1e6);
    paged_attention_init();
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (bench) {
      run_bench(st);
      CK(cudaStreamDestroy(st));
      return 0;
    }
    const std::vector<AttnCase> cases = attention_cases();
    for_selected(cases, quick, filter, "", 1000,
                 [&](const AttnCase& c, uint64_t seed) { run_attention_case(c, seed, st); });
    for_selected(cases, quick, filter, "fused ", 1000,
                 [&](const AttnCase& c, uint64_t seed) { run_fused_case(c, seed, st); });
    if (filter.empty() || std::string("graph").find(filter) != std::string::npos) {
      AttnCase g;
      g.name = "graph decode G4 bucket 2048";
      g.bf16 = true, g.D = 128, g.nq = 32, g.nkv = 8, g.bs = 16;
      g.kv_bound = 2048;
      std::mt19937 rng(3);
      std::vector<SeqSpec> a, b;
      for (int i = 0; i < 12; ++i) {
        a.push_back({1, static_cast<int>(rng() % 2000)});
        b.push_back({1, static_cast<int>(rng() % 700)});
      }
      g.seqs = a;
      if (!quick) run_graph_case(g, b, 77, st);
      AttnCase g2;
      g2.name = "graph decode G8 hd64 bucket 1024";
      g2.bf16 = false, g2.D = 64, g2.nq = 32, g2.nkv = 4, g2.bs = 16;
      g2.kv_bound = quick ? 256 : 1024;
      g2.seqs = quick ? decode_seqs({200, 3, 64}) : decode_seqs({1000, 3, 64, 512, 65});
      run_graph_case(g2, quick ? decode_seqs({7, 255, 129}) : decode_seqs({7, 1023, 129, 0, 300}),
                     78, st);
    }
    run_cos_sin_check(st);
    for_selected(rope_cases(), quick, filter, "rope ", 5000,
                 [&](const RopeCase& c, uint64_t seed) { run_rope_case(c, seed, st); });
    CK(cudaStreamDestroy(st));
  } catch (const std::exception& e) {
    std::printf("[FAIL] fatal: %s\n", e.what());
    std::printf("SUMMARY: FATAL after %d cases (%d failed)\n", g_cases, g_failures);
    return 1;
  }
  std::printf("SUMMARY: %d cases, %d failed\n", g_cases, g_failures);
  return g_failures ? 1 : 0;
}
