// CPU emulation of the CUDA attention kernels (attn_tile.cuh + attn_plan.h), for machines without
// a GPU. The kernels' C++ source is compiled by the host compiler unchanged; only the device
// builtins are supplied here:
//  * the runtime (fibers, barriers, warp collectives, mma.sync, checked copies) is cuda_emu.h's,
//    shared with the GEMV emulator; ldmatrix, cp.async, mbarriers, bulk and tensor copies are
//    emulated here from the PTX ISA's documented layouts (written independently of the kernel's
//    lane-address formulas, so the two cross-check);
//  * cp.async copies either at issue ("immediate") or only at the issuing thread's
//    cp.async.wait_group ("deferred"), the two extremes of what the hardware may do; every
//    smem/global address the copies and ldmatrix use is range- and alignment-checked against the
//    buffers the test registered.
// The host plan (validate, make_plan, execute_plan) is the production code of attn_plan.h.
// Build: g++ -std=c++20 -O2 -Isrc -I/usr/local/cuda/include tests/cuda/attn_emulation_test.cpp
// (tools/device/cuda_attention_kernels.sh --emulate does it). Runs the shared case list.
#define PERFX_ATTN_EMULATION 1
#include "cuda_emu.h"
// (first: the kernels' headers below see the emulator's device qualifiers and hooks)
#include "backend/cuda/attn_plan.h"  // KvTensorMap (tma_load_2d below)

namespace perfx::cuda::attn_detail {

/// mma.sync.m16n8k16 (cuda_emu.h's emu_mma16816).
template <typename T>
inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu_mma16816<T>(d, a, b0, b1);
}

/// ldmatrix.m8n8.x4.b16: lanes 8j..8j+7 give the row addresses of matrix j; lane l receives in
/// register j the elements (row l/4, cols 2(l%4), 2(l%4)+1) of matrix j, or with .trans the
/// elements (rows 2(l%4), 2(l%4)+1; col l/4). Low 16 bits = first element.
inline void ldmatrix_any(uint32_t (&r)[4], const void* smem, bool trans) {
  emu::check_smem(smem, 16, trans ? "ldmatrix.trans row" : "ldmatrix row");
  emu::Slot s{};
  s.v[0] = reinterpret_cast<uintptr_t>(smem);
  emu::collective(s, [&](const emu::Slot* all) {
    const int l = static_cast<int>(emu::lane());
    auto row = [&](int i) {
      return reinterpret_cast<const uint16_t*>(static_cast<uintptr_t>(all[i].v[0]));
    };
    for (int j = 0; j < 4; ++j) {
      uint16_t lo, hi;
      if (!trans) {
        const uint16_t* rp = row(8 * j + l / 4);
        lo = rp[2 * (l % 4)];
        hi = rp[2 * (l % 4) + 1];
      } else {
        lo = row(8 * j + 2 * (l % 4))[l / 4];
        hi = row(8 * j + 2 * (l % 4) + 1)[l / 4];
      }
      r[j] = lo | static_cast<uint32_t>(hi) << 16;
    }
  });
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  ldmatrix_any(r, smem, false);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  ldmatrix_any(r, smem, true);
}

inline void cp_async_n(void* smem, const void* gmem, int src_bytes, int size) {
  emu::check_smem(smem, (size_t)size, "cp.async destination");
  if (src_bytes != 0 && src_bytes != size) emu::die("cp.async src_bytes not 0 or the copy size");
  emu::check_global(gmem, src_bytes ? (size_t)size : 1, "cp.async source", src_bytes != 0);
  if (src_bytes && reinterpret_cast<uintptr_t>(gmem) % (uintptr_t)size)
    emu::die("cp.async source misaligned");
  emu::Copy c{smem, gmem, src_bytes, size};
  if (emu::g_deferred && emu::g_snapshot && src_bytes != 0) {
    c.taken = true;
    std::memcpy(c.data, gmem, (size_t)size);
  }
  if (emu::g_deferred)
    emu::g_open[emu::tid()].push_back(c);
  else
    emu::do_copy(c);
}
inline void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  cp_async_n(smem, gmem, src_bytes, 16);
}
inline void cp_async_8(void* smem, const void* gmem, int src_bytes) {
  cp_async_n(smem, gmem, src_bytes, 8);
}
inline void cp_async_commit() {
  if (!emu::g_deferred) return;
  emu::g_groups[emu::tid()].push_back(std::move(emu::g_open[emu::tid()]));
  emu::g_open[emu::tid()].clear();
}
template <int N>
inline void cp_async_wait() {
  if (!emu::g_deferred) return;
  auto& q = emu::g_groups[emu::tid()];
  while (static_cast<int>(q.size()) > N) {
    for (const emu::Copy& c : q.front()) emu::do_copy(c);
    q.erase(q.begin());
  }
}

// Bulk copies on mbarriers (the early_bulk path). One phase per mbarrier, as the kernel uses them:
// it completes once `count` threads have arrived and the bytes they announced (expect_tx) equal
// the bytes issued on it; deferred copies land then. Announcing more or fewer bytes than are
// issued leaves the count off zero, so the waiters never finish (reported as a deadlock); a copy
// or arrival after the phase completed fails; a copy never waited for fails at the CTA's end; a
// thread that arrives in the same barrier interval as the init (no __syncthreads between them)
// fails. Not modelled: the alignment of the barrier itself, proxy fences.
constexpr bool kHasBulkCopy = true;
inline emu::MBar& mbar_of(uint64_t* bar, const char* what) {
  auto it = emu::g_mbars.find(bar);
  if (it == emu::g_mbars.end()) emu::die(std::string(what) + ": mbarrier used before its init");
  if (it->second.init_gen == emu::g_cta_bar.gen && it->second.init_tid != emu::tid())
    emu::die(std::string(what) + ": mbarrier init not published by a __syncthreads");
  return it->second;
}
inline void mbar_init(uint64_t* bar, unsigned count) {
  emu::MBar m;
  m.count = static_cast<int>(count);
  m.init_gen = emu::g_cta_bar.gen;
  m.init_tid = emu::tid();
  emu::g_mbars[bar] = std::move(m);
}
inline void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  emu::MBar& m = mbar_of(bar, "arrive.expect_tx");
  if (m.done || m.arrived == m.count) emu::die("mbarrier: arrival after its phase completed");
  ++m.arrived;
  m.tx += bytes;
  ++emu::g_events;
}
/// One bulk copy's bytes on `m`: written at once (immediate copies), or when the phase completes
/// (deferred; g_snapshot: the source as it was at issue). src null: zeros (TMA's out-of-bounds
/// fill).
inline void stage_bulk(emu::MBar& m, void* dst, const void* src, unsigned bytes) {
  const auto* s = static_cast<const unsigned char*>(src);
  if (!emu::g_deferred) {
    if (s)
      std::memcpy(dst, s, bytes);
    else
      std::memset(dst, 0, bytes);
    return;
  }
  emu::BulkCopy c{dst, src, bytes, {}};
  if (!s)
    c.data.assign(bytes, 0);
  else if (emu::g_snapshot)
    c.data.assign(s, s + bytes);
  m.copies.push_back(std::move(c));
}
inline void bulk_copy_g2s(void* smem, const void* gmem, unsigned bytes, uint64_t* bar) {
  emu::MBar& m = mbar_of(bar, "cp.async.bulk");
  if (m.done) emu::die("cp.async.bulk: completes on an mbarrier whose phase has completed");
  if (bytes == 0 || bytes % 16 || reinterpret_cast<uintptr_t>(gmem) % 16)
    emu::die("cp.async.bulk: size not a positive multiple of 16 or source misaligned");
  emu::check_smem(smem, bytes, "cp.async.bulk destination");
  emu::check_global(gmem, bytes, "cp.async.bulk source");
  stage_bulk(m, smem, gmem, bytes);
  m.tx -= bytes;
  ++m.issued;
  ++emu::g_events;
}
// A tensor copy (the block path of early_bulk): the box m.box_rows x m.box_cols of the view at
// (column c0, row c1), rows packed at box_cols elements, columns past the view read as zeros (as
// TMA's out-of-bounds fill), every box byte counted against the barrier. Checked: the box's rows
// inside the view, the destination 128-byte aligned and inside shared memory, each row's source
// inside a registered buffer (and not hidden before the PDL wait).
int64_t g_tensor_copies = 0;  // tma_load_2d calls (the block path must run where configured)
inline void tma_load_2d(void* smem, const KvTensorMap& m, int c0, int c1, uint64_t* bar) {
  ++g_tensor_copies;
  emu::MBar& mb = mbar_of(bar, "cp.async.bulk.tensor");
  if (mb.done) emu::die("cp.async.bulk.tensor: completes on an mbarrier whose phase has completed");
  if (m.rows <= 0 || m.box_rows <= 0 || m.box_cols <= 0 || (m.box_cols * 2) % 16 ||
      m.box_rows > 256 || m.box_cols > 256)
    emu::die("cp.async.bulk.tensor: no view, or a box TMA refuses");
  if (c0 < 0 || c0 >= m.cols || c1 < 0 || c1 + m.box_rows > m.rows)
    emu::die("cp.async.bulk.tensor: the box starts outside the view or runs past its rows");
  if (reinterpret_cast<uintptr_t>(smem) % 128)
    emu::die("cp.async.bulk.tensor: destination not 128-byte aligned");
  const unsigned bytes = static_cast<unsigned>(m.box_rows * m.box_cols * 2);
  emu::check_smem(smem, bytes, "cp.async.bulk.tensor destination");
  const int64_t in_cols = std::min<int64_t>(m.box_cols, m.cols - c0);
  for (int r = 0; r < m.box_rows; ++r) {
    unsigned char* dst =
        static_cast<unsigned char*>(smem) + static_cast<size_t>(r) * m.box_cols * 2;
    const unsigned char* src =
        static_cast<const unsigned char*>(m.base) + ((c1 + r) * m.cols + c0) * 2;
    emu::check_global(src, static_cast<size_t>(in_cols) * 2, "cp.async.bulk.tensor source");
    stage_bulk(mb, dst, src, static_cast<unsigned>(in_cols * 2));
    if (in_cols < m.box_cols)  // past the view's columns: zeros
      stage_bulk(mb, dst + in_cols * 2, nullptr, static_cast<unsigned>((m.box_cols - in_cols) * 2));
  }
  mb.tx -= bytes;
  ++mb.issued;
  ++emu::g_events;
}

inline void mbar_wait(uint64_t* bar, unsigned parity) {
  if (parity != 0) emu::die("mbarrier: the kernel uses one phase (parity 0) per barrier");
  emu::MBar* m = &mbar_of(bar, "try_wait");
  while (!m->done && !(m->arrived == m->count && m->tx == 0)) {
    emu::yield();
    m = &mbar_of(bar, "try_wait");
  }
  if (!m->done) {  // the phase completes: deferred copies land
    m->done = true;
    for (const emu::BulkCopy& c : m->copies)
      std::memcpy(c.dst, c.data.empty() ? c.src : c.data.data(), c.bytes);
    m->copies.clear();
    ++emu::g_events;
  }
}

}  // namespace perfx::cuda::attn_detail

#include "attn_test_common.h"
#include "backend/cuda/attn_tile.cuh"

// rope_kv.cu's kernel keeps its tables in static __shared__ arrays: one copy per CTA, which with
// one CTA at a time is a function-local static.
#undef __shared__
#define __shared__ static
#include "backend/cuda/rope_kv.cu"
#undef __shared__
#define __shared__

using namespace perfx::cuda;
using namespace perfx::cuda::attn_detail;
using namespace attn_test;

namespace {

template <typename T, int D, int WM, int WN, bool kSplit>
void run_tile_grid(const TileArgs& t, Grid g) {
  emu::g_smem_limit =
      TileCfg<D, WM, WN>::kSmemBytes + (kSplit ? rope_smem_bytes(t.rope_tokens, D) : 0);
  if (emu::g_smem_limit > emu::kSmemBytes) emu::die("smem larger than the emulator's");
  gridDim = dim3(g.x, g.y, g.z);
  blockDim = dim3(kThreads);
  // Split-KV grids run their splits last to first: the CTA that finishes the count is then split
  // 0, so a merge that assumed the last split finishes last reads partials not yet written.
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned xx = 0; xx < g.x; ++xx) {
        const unsigned x = kSplit ? g.x - 1 - xx : xx;
        blockIdx = make_uint3(x, y, z);
        emu::run_block(kThreads, [&] {
          if constexpr (D % 32 == 0) {
            if (t.k_scale) return attn_tile_kernel<T, D, WM, WN, kSplit, true>(t);
          }
          attn_tile_kernel<T, D, WM, WN, kSplit>(t);
        });
      }
}

template <typename T, int D>
void run_reduce_grid(const TileArgs& t, Grid g) {
  emu::g_smem_limit = 0;
  gridDim = dim3(g.x, g.y, g.z);
  blockDim = dim3(kThreads);
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        blockIdx = make_uint3(x, y, z);
        emu::run_block(kThreads, [&] { split_reduce_kernel<T, D>(t); });
      }
}

enum class Kind { kPrefill, kSplit, kReduce };

template <typename T, int D>
void run_kind(Kind k, const TileArgs& t, Grid g) {
  switch (k) {
    case Kind::kPrefill:
      return run_tile_grid<T, D, 4, 1, false>(t, g);  // as attention_prefill.cu
    case Kind::kSplit:
      return run_tile_grid<T, D, 1, 4, true>(t, g);  // as attention_decode.cu
    case Kind::kReduce:
      return run_reduce_grid<T, D>(t, g);
  }
}

template <typename T>
void run_kind_d(Kind k, int D, const TileArgs& t, Grid g) {
  switch (D) {
    case 64:
      return run_kind<T, 64>(k, t, g);
    case 80:
      return run_kind<T, 80>(k, t, g);
    case 96:
      return run_kind<T, 96>(k, t, g);
    case 128:
      return run_kind<T, 128>(k, t, g);
    default:
      emu::die("head_dim");
  }
}

struct EmuLauncher {
  bool bf16;
  int D;
  int* launches;
  void go(Kind k, const TileArgs& t, Grid g) const {
    ++*launches;
    if (bf16)
      run_kind_d<__nv_bfloat16>(k, D, t, g);
    else
      run_kind_d<__half>(k, D, t, g);
  }
  void prefill(const TileArgs& t, Grid g) const { go(Kind::kPrefill, t, g); }
  void split(const TileArgs& t, Grid g) const { go(Kind::kSplit, t, g); }
  void reduce(const TileArgs& t, Grid g) const { go(Kind::kReduce, t, g); }
};

template <typename V>
void add_range(const std::vector<V>& v) {
  emu::g_ranges.push_back({reinterpret_cast<const char*>(v.data()), v.size() * sizeof(V)});
}

struct Config {
  const char* name;
  int n_sms, occupancy;   // the plan's device model: many splits (132, 3) or few (1, 1)
  bool deferred;          // cp.async timing
  bool early_kv;          // PagedAttentionArgs::early_kv
  bool snapshot = false;  // deferred copies read their source at issue (emu::g_snapshot)
  bool counters = false;  // PagedAttentionArgs::split_counters (the last CTA merges the splits)
  bool bulk = false;      // PagedAttentionArgs::early_bulk (early_kv's keys as bulk copies)
  bool blocks = false;    // PagedAttentionArgs::kv_slots given: bulk copies a KV block at a time
};

// The split counters (zeroed once; every call must leave them zeroed).
std::vector<int> g_counters(counters_bytes() / sizeof(int), 0);

/// Counts a case that left a split counter non-zero (the next call would merge too early).
void check_counters(const std::string& what) {
  int64_t bad = 0;
  for (int& c : g_counters) bad += c != 0, c = 0;
  if (bad == 0) return;
  ++g_cases;
  ++g_failures;
  std::printf("[FAIL] %s: %lld split counters left non-zero\n", what.c_str(), (long long)bad);
}

/// emu::g_pdl_hidden for batch b: what RoPE + KV store, the kernel before attention, writes — q
/// (rotated in place; or, fused, the raw QKV output `qkv` of `qkv_bytes`) and each new token's
/// K / V cache rows (q8: and their scale records).
void set_pdl_hidden(const AttnCase& c, const HostBatch& b, const void* qkv, size_t qkv_bytes) {
  emu::g_pdl_hidden.clear();
  auto hide = [](const void* p, size_t n) {
    emu::g_pdl_hidden.push_back(emu::Range{static_cast<const char*>(p), n});
  };
  hide(qkv, qkv_bytes);
  const size_t row = static_cast<size_t>(c.nkv) * c.D;  // cache elements per slot
  const size_t srow = static_cast<size_t>(c.nkv) * q8_scale_stride(c.D);
  for (int s = 0; s < b.n_seqs; ++s) {
    const int q_len = b.q_start[s + 1] - b.q_start[s];
    for (int j = b.kv_len[s] - q_len; j < b.kv_len[s]; ++j) {
      if (j < 0 || j / c.bs >= b.max_blocks ||
          b.table[static_cast<size_t>(s) * b.max_blocks + j / c.bs] < 0)
        continue;
      const size_t slot = static_cast<size_t>(slot_of(b, c.bs, s, j));
      if (c.q8) {
        hide(b.k8.data() + slot * row, row);
        hide(b.v8.data() + slot * row, row);
        hide(b.kscale.data() + slot * srow, srow * sizeof(u16));
        hide(b.vscale.data() + slot * srow, srow * sizeof(u16));
      } else {
        hide(b.kpool.data() + slot * row, row * sizeof(u16));
        hide(b.vpool.data() + slot * row, row * sizeof(u16));
      }
    }
  }
}

/// Registers batch b's buffers (and `extra`) as the only memory the kernels may touch.
void register_batch(const HostBatch& b,
                    std::initializer_list<std::pair<const void*, size_t>> extra) {
  emu::g_ranges.clear();
  add_range(b.qkv);
  add_range(b.kpool);
  add_range(b.vpool);
  add_range(b.k8);
  add_range(b.v8);
  add_range(b.kscale);
  add_range(b.vscale);
  add_range(b.table);
  add_range(b.q_start);
  add_range(b.kv_len);
  for (const auto& [p, n] : extra) emu::g_ranges.push_back({static_cast<const char*>(p), n});
}

/// paged_attention's arguments for batch b (q = b.qkv, caches = b's pools) under `cfg`.
PagedAttentionArgs emu_args(const AttnCase& c, const HostBatch& b, std::vector<u16>& out,
                            int64_t ldo, std::vector<float>& ws, AttnPath path, const Config& cfg) {
  PagedAttentionArgs a;
  a.dtype = c.bf16 ? AttnDtype::kBF16 : AttnDtype::kF16;
  a.q = b.qkv.data();
  a.ldq = b.ldq;
  a.out = out.data();
  a.ldo = ldo;
  a.k_cache = b.kpool.data();
  a.v_cache = b.vpool.data();
  if (c.q8) {  // the int8 pools; kpool / vpool hold their dequantized values for the reference
    a.kv_q8 = true;
    a.k_cache = b.k8.data();
    a.v_cache = b.v8.data();
    a.k_scale = b.kscale.data();
    a.v_scale = b.vscale.data();
  }
  a.n_q_heads = c.nq;
  a.n_kv_heads = c.nkv;
  a.head_dim = c.D;
  a.block_size = c.bs;
  a.block_tables = b.table.data();
  a.max_blocks = b.max_blocks;
  a.seq_q_start = b.q_start.data();
  a.seq_kv_len = b.kv_len.data();
  a.n_seqs = b.n_seqs;
  a.n_tokens = b.n_tokens;
  a.max_q_len = c.q_bound ? c.q_bound : b.max_q;
  a.max_kv_len = c.kv_bound ? c.kv_bound : b.max_kv;
  a.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  a.workspace = ws.data();
  a.workspace_bytes = ws.size() * sizeof(float);
  a.path = path;
  a.early_kv = cfg.early_kv;
  a.early_bulk = cfg.bulk;
  a.kv_slots = cfg.blocks ? static_cast<int64_t>(b.n_blocks) * c.bs : 0;
  emu::g_deferred = cfg.deferred;
  emu::g_snapshot = cfg.snapshot;
  a.split_counters = cfg.counters ? g_counters.data() : nullptr;
  return a;
}

/// Whether case c's batch b gives early_bulk's block path (Config::blocks) a block to copy: an
/// fp16/bf16 cache, a block size that path takes (8..64, dividing 64; attn_plan.h kv_box_view) and
/// a sequence on the split-KV kernel with a whole block of earlier keys.
bool block_path_expected(const AttnCase& c, const HostBatch& b) {
  if (c.q8 || c.bs < 8 || kTileKeys % c.bs != 0) return false;
  const int G = c.nq / c.nkv;
  for (int s = 0; s < b.n_seqs; ++s) {
    const int q_len = b.q_start[s + 1] - b.q_start[s];
    if (q_len > 0 && q_len * G <= kSplitRows && b.kv_len[s] - q_len >= c.bs) return true;
  }
  return false;
}

/// Counts a case whose blocks configuration issued no tensor copy where block_path_expected.
void check_block_path(const std::string& what, const Config& cfg, bool expected,
                      int64_t copies_before) {
  if (!cfg.blocks || !cfg.early_kv || !expected || g_tensor_copies > copies_before) return;
  ++g_cases;
  ++g_failures;
  std::printf("[FAIL] %s: no KV block was copied by a tensor copy\n", what.c_str());
}

void run_case(const AttnCase& c, uint64_t seed, const std::vector<Config>& configs) {
  const HostBatch b = make_batch(c, seed);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.D));
  const std::vector<double> ref = ref_attention(c, b, scale);
  const int64_t ldo = c.nq * c.D + c.out_pad;
  const int n_out_rows = std::max(b.n_tokens, 1);
  for (const Config& cfg : configs) {
    for (AttnPath path : {AttnPath::kAuto, AttnPath::kPrefillOnly}) {
      std::vector<u16> out(static_cast<size_t>(n_out_rows) * ldo, kPoison);
      std::vector<float> ws(workspace_bytes(c.D) / sizeof(float), NAN);
      register_batch(b, {});
      set_pdl_hidden(c, b, b.qkv.data(), b.qkv.size() * sizeof(u16));
      const PagedAttentionArgs a = emu_args(c, b, out, ldo, ws, path, cfg);
      int launches = 0;
      PagedAttentionPlan plan;
      const int64_t copies_before = g_tensor_copies;
      try {
        validate(a);
        plan = make_plan(a, cfg.n_sms, cfg.occupancy);
        execute_plan(a, plan, EmuLauncher{c.bf16, c.D, &launches});
        if (path == AttnPath::kAuto)
          check_block_path("emu/" + std::string(cfg.name) + " " + c.name, cfg,
                           block_path_expected(c, b), copies_before);
      } catch (const std::exception& e) {
        ++g_cases;
        ++g_failures;
        std::printf("[FAIL] emu %s %s: exception: %s\n", c.name.c_str(), path_name(path), e.what());
        continue;
      }
      const std::string tag = std::string("emu/") + cfg.name;
      check_counters(tag + " " + c.name);
      check_and_report(tag.c_str(), c, b, path, plan, out, out, ldo, ref);
    }
  }
  emu::g_pdl_hidden.clear();  // the batch's buffers are freed on return
}

/// Runs rope_norm_kv_kernel over case c's grid, as rope_norm_kv_store launches it.
void launch_rope(const RopeCase& c, const RopeKvArgs& a, bool early) {
  const int n_heads = c.nq + 2 * c.nkv, threads = 256;  // as rope_norm_kv_store launches it
  gridDim = dim3(static_cast<unsigned>(c.n_tokens), static_cast<unsigned>((n_heads + 7) / 8));
  blockDim = dim3(threads);
  emu::g_smem_limit = 0;
  // q, k, v are the QKV projection's output: read only after pdl_wait.
  emu::g_pdl_hidden.clear();
  const size_t tokens = static_cast<size_t>(c.n_tokens), eb = 2;  // fp16 or bf16
  emu::g_pdl_hidden.push_back({static_cast<const char*>(a.q), tokens * a.ldq * eb});
  emu::g_pdl_hidden.push_back({static_cast<const char*>(a.k), tokens * a.ldk * eb});
  emu::g_pdl_hidden.push_back({static_cast<const char*>(a.v), tokens * a.ldv * eb});
  for (unsigned y = 0; y < gridDim.y; ++y)
    for (unsigned x = 0; x < gridDim.x; ++x) {
      blockIdx = make_uint3(x, y, 0);
      emu::run_block(threads, [&] {
        if (c.bf16)
          perfx::cuda::rope_norm_kv_kernel<__nv_bfloat16>(a, early);
        else
          perfx::cuda::rope_norm_kv_kernel<__half>(a, early);
      });
    }
  emu::g_pdl_hidden.clear();
}

/// The same case into a q8_0 cache (RopeKvArgs::kv_q8), checked against the fp16/bf16 run's
/// cache (kc, vc: the kernel's own K after norm + RoPE, and V, rounded to T): per block of 32,
/// the scale is max|x| / 127 within T's and fp16's rounding, every value within half a step (plus
/// T's rounding) of x, slots not written and the records' padding halves untouched.
void run_rope_q8(const RopeCase& c, const RopeData& d, const std::vector<u16>& kc,
                 const std::vector<u16>& vc) {
  const int ss = q8_scale_stride(c.hd), nb = c.hd / 32;
  std::vector<u16> qkv = d.qkv;
  std::vector<int8_t> k8(static_cast<size_t>(d.n_slots * d.vec), -128), v8 = k8;
  std::vector<u16> ks(static_cast<size_t>(d.n_slots * c.nkv * ss), kPoison), vs = ks;
  RopeKvArgs a = rope_args(c, d, qkv.data(), k8.data(), v8.data(), d.pos.data(), d.slots.data(),
                           d.inv_freq.data(), d.qw.data(), d.kw.data());
  a.kv_q8 = true;
  a.k_scale = ks.data();
  a.v_scale = vs.data();
  launch_rope(c, a, /*early=*/false);  // the table after the wait (PERFX_CUDA_PDL_EARLY=0)
  const double rel = c.bf16 ? 1.0 / 128 : 1.0 / 1024;
  int64_t bad = 0, stray = 0;
  std::string first;
  std::vector<char> used(static_cast<size_t>(d.n_slots), 0);
  for (int t = 0; t < c.n_tokens; ++t)
    if (d.slots[t] >= 0 && d.slots[t] < d.n_slots) used[static_cast<size_t>(d.slots[t])] = 1;
  for (int64_t slot = 0; slot < d.n_slots; ++slot)
    for (int h = 0; h < c.nkv; ++h)
      for (int which = 0; which < 2; ++which) {
        const std::vector<u16>& ref = which ? vc : kc;
        const std::vector<int8_t>& q = which ? v8 : k8;
        const std::vector<u16>& sc = which ? vs : ks;
        const int64_t at = (slot * c.nkv + h) * c.hd, rec = (slot * c.nkv + h) * ss;
        for (int j = nb; j < ss; ++j) stray += sc[static_cast<size_t>(rec + j)] != kPoison;
        if (!used[static_cast<size_t>(slot)]) {
          for (int e = 0; e < c.hd; ++e) stray += q[static_cast<size_t>(at + e)] != -128;
          for (int j = 0; j < nb; ++j) stray += sc[static_cast<size_t>(rec + j)] != kPoison;
          continue;
        }
        for (int j = 0; j < nb; ++j) {
          double amax = 0;
          for (int e = 32 * j; e < 32 * j + 32; ++e)
            amax = std::max(amax, (double)std::fabs(t2f(ref[static_cast<size_t>(at + e)], c.bf16)));
          const double dq = t2f(sc[static_cast<size_t>(rec + j)], false);
          bool ok = std::fabs(dq - amax / 127) <= (rel + 1.0 / 1024) * amax / 127 + 1e-7;
          for (int e = 32 * j; e < 32 * j + 32 && ok; ++e) {
            const double x = t2f(ref[static_cast<size_t>(at + e)], c.bf16);
            const double got = q[static_cast<size_t>(at + e)] * dq;
            ok = std::fabs(got - x) <= 0.5 * dq * (1 + 1e-2) + rel * amax + 1e-7;
          }
          if (!ok) {
            ++bad;
            if (first.empty())
              first = std::string(which ? "v" : "k") + " slot " + std::to_string(slot) + " head " +
                      std::to_string(h) + " block " + std::to_string(j);
          }
        }
      }
  const bool pass = bad == 0 && stray == 0;
  ++g_cases;
  if (!pass) ++g_failures;
  std::printf("[%s] emu-rope-q8 %s | %s hd%d | blocks off %lld, stray writes %lld%s%s\n",
              pass ? "PASS" : "FAIL", c.name.c_str(), c.bf16 ? "bf16" : "fp16", c.hd,
              (long long)bad, (long long)stray, first.empty() ? "" : " first: ", first.c_str());
}

void run_rope(const RopeCase& c, uint64_t seed) {
  const RopeData d = make_rope_data(c, seed);
  std::vector<u16> qkv = d.qkv, kc(static_cast<size_t>(d.n_slots * d.vec), kPoison),
                   vc(static_cast<size_t>(d.n_slots * d.vec), kPoison);
  const RopeKvArgs a = rope_args(c, d, qkv.data(), kc.data(), vc.data(), d.pos.data(),
                                 d.slots.data(), d.inv_freq.data(), d.qw.data(), d.kw.data());
  launch_rope(c, a, /*early=*/true);
  check_rope("emu-rope", c, d, qkv, kc, vc);
  if (c.hd % 32 == 0) run_rope_q8(c, d, kc, vc);
}

/// RoPE + KV store fused into the split-KV kernel against the two kernels it replaces: the same
/// batch with its new tokens' cache rows poisoned, run (a) rope_norm_kv_kernel then the plan and
/// (b) the plan with PagedAttentionArgs::rope, under each configuration; out and the whole cache
/// must agree bit for bit.
void run_fused(const AttnCase& c, uint64_t seed, const std::vector<Config>& configs) {
  HostBatch b = make_batch(c, seed);
  if (!fused_rope_applies(c, b)) return;
  poison_new_rows(c, b);
  const FusedRope f = make_fused_rope(c, b, seed + 77);
  const int64_t ldo = c.nq * c.D + c.out_pad;
  const size_t n_out = static_cast<size_t>(b.n_tokens) * ldo;
  for (const Config& cfg : configs) {
    FusedOutcome res[2];
    bool failed = false;
    for (int fused = 0; fused < 2 && !failed; ++fused) {
      // Each run's own tensor copies are checked (the fused run's must not borrow the unfused's).
      const int64_t copies_before = g_tensor_copies;
      HostBatch u = b;  // this run's cache
      std::vector<u16> qkv = f.d.qkv, out(n_out, kPoison);
      std::vector<float> ws(workspace_bytes(c.D) / sizeof(float), NAN);
      u.qkv = qkv;  // q: the first nq * D columns of the raw QKV output
      u.ldq = f.d.ld;
      register_batch(u, {{f.d.inv_freq.data(), f.d.inv_freq.size() * 4},
                         {f.d.qw.data(), f.d.qw.size() * 4},
                         {f.d.kw.data(), f.d.kw.size() * 4}});
      try {
        if (!fused) {  // the unfused pair: RoPE + KV store (into u's cache, q in place), then
                       // attention
          RopeKvArgs ra =
              rope_args(f.rc, f.d, u.qkv.data(), c.q8 ? (void*)u.k8.data() : u.kpool.data(),
                        c.q8 ? (void*)u.v8.data() : u.vpool.data(), f.d.pos.data(),
                        f.d.slots.data(), f.d.inv_freq.data(), f.d.qw.data(), f.d.kw.data());
          if (c.q8) {
            ra.kv_q8 = true;
            ra.k_scale = u.kscale.data();
            ra.v_scale = u.vscale.data();
          }
          launch_rope(f.rc, ra, cfg.early_kv);
        }
        const AttnRopeArgs rr =
            fused_rope_args(f, u.qkv.data(), f.d.inv_freq.data(), f.d.qw.data(), f.d.kw.data());
        PagedAttentionArgs a = emu_args(c, u, out, ldo, ws, AttnPath::kAuto, cfg);
        if (fused) a.rope = &rr;
        // The unfused pair with the reduce kernel; the fused run with split counters (so the
        // bitwise comparison covers the last-CTA merge too).
        a.split_counters = fused ? g_counters.data() : nullptr;
        set_pdl_hidden(c, u, u.qkv.data(), u.qkv.size() * sizeof(u16));
        validate(a);
        const PagedAttentionPlan plan = make_plan(a, cfg.n_sms, cfg.occupancy);
        int launches = 0;
        execute_plan(a, plan, EmuLauncher{c.bf16, c.D, &launches});
        check_counters("emu-fused " + c.name);
        if (fused)
          check_block_path("emu-fused/" + std::string(cfg.name) + " " + c.name, cfg,
                           block_path_expected(c, b), copies_before);
      } catch (const std::exception& e) {
        ++g_cases;
        ++g_failures;
        std::printf("[FAIL] emu-fused %s (%s): exception: %s\n", c.name.c_str(),
                    fused ? "fused" : "unfused", e.what());
        failed = true;
        break;
      }
      res[fused] = FusedOutcome{out, u.kpool, u.vpool, u.kscale, u.vscale, u.k8, u.v8};
    }
    emu::g_pdl_hidden.clear();
    if (failed) continue;
    const std::string tag = std::string("emu-fused/") + cfg.name;
    check_fused(tag.c_str(), c, f, res[0], res[1]);
  }
}

/// choose_splits with a forced count (PERFX_CUDA_ATTN_SPLITS): the largest count <= force that
/// leaves no split empty, capped by the tiles; force 0 keeps the cost model's choice.
void check_forced_splits() {
  struct Want {
    int max_kv, force, splits, chunk;
  };
  // 8 tiles of 64 keys (512), 32 (KV head, sequence) pairs on the H200 model (132 SMs x 3)
  const Want wants[] = {{512, 4, 4, 128}, {512, 3, 3, 192}, {512, 100, 8, 64},
                        {512, 1, 1, 512}, {130, 2, 2, 128}, {100, 8, 2, 64}};
  for (const Want& w : wants) {
    int n = 0, chunk = 0;
    choose_splits(32, w.max_kv, 132, 3, &n, &chunk, w.force);
    ++g_cases;
    if (n != w.splits || chunk != w.chunk) {
      ++g_failures;
      std::printf("[FAIL] forced splits: kv %d force %d -> %d splits of %d keys, want %d of %d\n",
                  w.max_kv, w.force, n, chunk, w.splits, w.chunk);
    }
  }
  // force 0: the cost model's own choice (8 one-tile splits: 256 CTAs fit one round of 396)
  int n0 = 0, c0 = 0;
  choose_splits(32, 512, 132, 3, &n0, &c0, 0);
  ++g_cases;
  if (n0 != 8 || c0 != 64) {
    ++g_failures;
    std::printf(
        "[FAIL] forced splits: force 0 gave %d splits of %d keys, want the model's 8 of 64\n", n0,
        c0);
  }
}

/// choose_splits' merge charge per query row for one-round splits (PERFX_CUDA_ATTN_MERGE_ROWS,
/// default on): the shapes the twenty-sixth and twenty-seventh sessions measured and those the
/// rule moves, on the H200 model (132 SMs; 3 CTAs an SM for head_dim 128 and 64 alike here),
/// against the tile charge.
void check_merge_rows() {
  struct Want {
    const char* name;
    int64_t pairs;
    int max_kv, rows, tile_splits, row_splits;
  };
  const Want wants[] = {
      // 7B batch 1 at 65-128 keys: one row a CTA, two splits measured +1.7 % on those steps
      {"7B b1 128 keys", 32, 128, 1, 1, 2},
      // TinyLlama batch 1 (group 8): two splits measured -9 % there; both rules keep one
      {"TinyLlama b1 128 keys", 4, 128, 8, 1, 1},
      // a GQA-4 model (Mistral-7B) at batch 1: half a tile's charge, two splits
      {"GQA-4 b1 128 keys", 8, 128, 4, 1, 2},
      // 7B batch 8 at 512 keys: 3 splits need 2 rounds, so the merge costs a whole tile and
      // 2 x (3 + 1) + 1 ties 1 x (8 + 1) (at 1/8 a tile, 3 splits measured -2 %)
      {"7B b8 512 keys", 256, 512, 1, 1, 1},
      // Mistral-7B batch 8 at 128 keys: 64 pairs x 2 splits fit one round (measured +3.9 %)
      {"GQA-4 b8 128 keys", 64, 128, 4, 1, 2},
      // batch 6 at 192 keys: 192 pairs x 2 splits = 384 CTAs, one round of 396
      {"7B b6 192 keys", 192, 192, 1, 1, 2},
      // 7B batch 8 at 128 keys: a second split needs a second round (512 CTAs > 396 slots)
      {"7B b8 128 keys", 256, 128, 1, 1, 1},
      // rows 2 and 3 (a two- or three-token step without GQA): a quarter / three eighths
      {"7B b1 2 rows 128 keys", 32, 128, 2, 1, 2},
      {"7B b1 3 rows 128 keys", 32, 128, 3, 1, 2},
      // 16 rows (the split-KV CTA's most) and 0 (counted as 1): a whole tile / an eighth
      {"16 rows 128 keys", 32, 128, 16, 1, 1},
      {"0 rows 128 keys", 32, 128, 0, 1, 2},
  };
  for (const Want& w : wants)
    for (const bool per_row : {false, true}) {
      int n = 0, chunk = 0;
      choose_splits(w.pairs, w.max_kv, 132, 3, &n, &chunk, 0, w.rows, per_row);
      const int want = per_row ? w.row_splits : w.tile_splits;
      ++g_cases;
      if (n != want) {
        ++g_failures;
        std::printf("[FAIL] merge charge (%s): %s -> %d splits, want %d\n",
                    per_row ? "per row" : "per tile", w.name, n, want);
      }
    }
  // make_plan hands choose_splits max_q_len * group as the rows, and the knob
  struct PlanWant {
    const char* name;
    int n_seqs, n_q_heads, n_kv_heads, max_q_len, tile_splits, row_splits;
  };
  const PlanWant plans[] = {{"plan 7B b1", 1, 32, 32, 1, 1, 2},
                            {"plan TinyLlama b1 (group 8)", 1, 32, 4, 1, 1, 1},
                            {"plan Mistral b8 (group 4)", 8, 32, 8, 1, 1, 2},
                            {"plan 7B b1 2-token step", 1, 32, 32, 2, 1, 2},
                            {"plan GQA-4 b1 2-token step (8 rows)", 1, 32, 8, 2, 1, 1},
                            // a mixed step (20-token prompt): its rows count as 16, a whole tile
                            {"plan 7B mixed 20-token step", 2, 32, 32, 20, 1, 1}};
  for (const PlanWant& w : plans)
    for (const bool per_row : {false, true}) {
      PagedAttentionArgs a{};
      a.n_seqs = w.n_seqs;
      a.n_q_heads = w.n_q_heads;
      a.n_kv_heads = w.n_kv_heads;
      a.head_dim = 128;
      a.max_q_len = w.max_q_len;
      a.max_kv_len = 128;
      const PagedAttentionPlan p = make_plan(a, 132, 3, 0, per_row);
      const int want = per_row ? w.row_splits : w.tile_splits;
      ++g_cases;
      if (!p.split_kv || p.n_splits != want) {
        ++g_failures;
        std::printf("[FAIL] merge charge (%s): %s -> split_kv %d, %d splits, want %d\n",
                    per_row ? "per row" : "per tile", w.name, p.split_kv ? 1 : 0, p.n_splits, want);
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--quick")
      quick = true;
    else if (s == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--filter SUBSTR]\n", argv[0]);
      return 2;
    }
  }
  // Each case: the H200 model (many splits) with immediate copies, the earlier keys as bulk
  // copies a KV block at a time and the last-CTA merge, and a 1-SM model (one split, the
  // direct-write path) with deferred copies, both with early_kv; and the H200 model without, its
  // deferred copies reading their sources at issue, with the reduce kernel.
  const std::vector<Config> configs = {
      {"h200/immediate/merge/bulk-blocks", 132, 3, false, true, false, true, true, true},
      {"1sm/deferred", 1, 1, true, true},
      {"h200/snapshot/late-kv", 132, 3, true, false, true}};
  if (filter.empty() || std::string("decode splits").find(filter) != std::string::npos) {
    check_forced_splits();
    check_merge_rows();
  }
  const std::vector<AttnCase> cases = attention_cases();
  for_selected(cases, quick, filter, "", 1000,
               [&](const AttnCase& c, uint64_t seed) { run_case(c, seed, configs); });
  // Fused RoPE: copies that read their sources at issue and land at the wait (the order in which
  // a load of a new key's cache row, issued before the prologue writes it, would land stale), on
  // both device models, the earlier keys as cp.async, as bulk copies a row (H200) and a KV block
  // at a time (1 SM); and read-late copies without early_kv.
  const std::vector<Config> fused_configs = {
      {"h200/snapshot", 132, 3, true, true, true},
      {"1sm/snapshot/bulk-blocks", 1, 1, true, true, true, false, true, true},
      {"h200/snapshot/bulk", 132, 3, true, true, true, false, true},
      {"1sm/deferred/late-kv", 1, 1, true, false}};
  for_selected(cases, quick, filter, "fused ", 1000,
               [&](const AttnCase& c, uint64_t seed) { run_fused(c, seed, fused_configs); });
  for_selected(rope_cases(), quick, filter, "rope ", 5000,
               [](const RopeCase& c, uint64_t seed) { run_rope(c, seed); });
  std::printf("SUMMARY: %d cases, %d failed\n", g_cases, g_failures);
  if (g_cases == 0) std::printf("no case matched the filter '%s'\n", filter.c_str());
  return g_failures || g_cases == 0 ? 1 : 0;
}
