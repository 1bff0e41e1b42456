// Host-side pieces shared by the CUDA attention test (attention_kernels_test.cu) and the CPU
// emulation test (attn_emulation_test.cpp): 16-bit conversions, the case list, random paged
// batches (shuffled blocks with holes, NaN-poisoned unused slots, -1 table tails), the fp64
// reference, the comparison and the per-case report line. Plain C++17 (host compiler or nvcc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/rope_kv.cuh"

namespace attn_test {

using namespace perfx::cuda;
using u16 = uint16_t;
constexpr u16 kPoison = 0xFFFF;  // NaN in both fp16 and bf16

inline u16 f2t(float f, bool bf16) {
  if (bf16) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<u16>(u >> 16);
  }
  const __half_raw r = __half(__float2half_rn(f));
  return r.x;
}

inline float t2f(u16 x, bool bf16) {
  if (bf16) {
    const uint32_t u = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half_raw r;
  r.x = x;
  return __half2float(__half(r));
}

inline void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  const unsigned nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (unsigned t = 0; t < nt; ++t)
    th.emplace_back([&, t] {
      for (size_t i = t; i < n; i += nt) fn(i);
    });
  for (auto& x : th) x.join();
}

inline const char* path_name(AttnPath p) {
  switch (p) {
    case AttnPath::kAuto:
      return "auto";
    case AttnPath::kPrefillOnly:
      return "prefill-only";
    case AttnPath::kSplitKvOnly:
      return "split-only";
  }
  return "?";
}

struct SeqSpec {
  int q_len, ctx;  // kv_len = ctx + q_len
};

struct AttnCase {
  std::string name;
  bool bf16 = false;
  int D = 128, nq = 8, nkv = 8, bs = 16;
  std::vector<SeqSpec> seqs;
  float q_amp = 4.f;   // q ~ U(-amp, amp): 4 moderately peaked softmax, 24 nearly one-hot
  int kv_bound = 0;    // max_kv_len passed (0: the real maximum)
  int q_bound = 0;     // max_q_len passed (0: the real maximum)
  int out_pad = 8;     // ldo = nq * D + out_pad (the gap must stay poisoned)
  bool quick = false;  // part of --quick
  bool q8 = false;     // a q8_0 cache (PagedAttentionArgs::kv_q8)
};

struct HostBatch {
  int n_seqs = 0, n_tokens = 0, max_blocks = 0, n_blocks = 0;
  int max_q = 0, max_kv = 0;
  int64_t ldq = 0;
  std::vector<int32_t> q_start, kv_len, table;
  std::vector<u16> kpool, vpool, qkv;
  // q8 cases: the int8 pools and fp16 scale records (q8_scale_stride 4 halves per slot and KV
  // head); kpool / vpool then hold q * d rounded to T, the values the kernel stages.
  std::vector<int8_t> k8, v8;
  std::vector<u16> kscale, vscale;
};

/// Quantizes the 32 values x as GGUF Q8_0 (d = max|x| / 127, q = round(x / d)): q, and d as fp16
/// bits; returns the dequantized values rounded to T in deq.
inline u16 quantize_q8_block(const float* x, int8_t* q, u16* deq, bool bf16) {
  float amax = 0.f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const u16 dh = f2t(amax / 127.f, false);
  const float d = t2f(dh, false), id = amax > 0.f ? 127.f / amax : 0.f;
  for (int i = 0; i < 32; ++i) {
    q[i] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[i] * id)), -127, 127));
    deq[i] = f2t(static_cast<float>(q[i]) * d, bf16);
  }
  return dh;
}

inline int64_t slot_of(const HostBatch& b, int bs, int s, int j) {
  return static_cast<int64_t>(b.table[static_cast<size_t>(s) * b.max_blocks + j / bs]) * bs +
         j % bs;
}

/// Random batch for case c. n_blocks_cap / max_blocks_cap (0: just enough) let two batches share
/// device buffers (graph replay test).
inline HostBatch make_batch(const AttnCase& c, uint64_t seed, int n_blocks_cap = 0,
                            int max_blocks_cap = 0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  HostBatch b;
  b.n_seqs = static_cast<int>(c.seqs.size());
  b.q_start.assign(b.n_seqs + 1, 0);
  b.kv_len.assign(b.n_seqs, 0);
  std::vector<int> nb(b.n_seqs);
  int total_blocks = 0, max_nb = 0;
  for (int s = 0; s < b.n_seqs; ++s) {
    b.q_start[s + 1] = b.q_start[s] + c.seqs[s].q_len;
    b.kv_len[s] = c.seqs[s].ctx + c.seqs[s].q_len;
    nb[s] = (b.kv_len[s] + c.bs - 1) / c.bs;
    total_blocks += nb[s];
    max_nb = std::max(max_nb, nb[s]);
    b.max_q = std::max(b.max_q, c.seqs[s].q_len);
    b.max_kv = std::max(b.max_kv, b.kv_len[s]);
  }
  b.n_tokens = b.q_start[b.n_seqs];
  b.n_blocks = n_blocks_cap ? n_blocks_cap : total_blocks + total_blocks / 3 + 2;  // holes
  b.max_blocks = max_blocks_cap ? max_blocks_cap : max_nb + 3;                     // -1 tails
  if (b.n_blocks < total_blocks || b.max_blocks < max_nb)
    throw std::runtime_error("make_batch: capacity too small");
  std::vector<int> perm(b.n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  b.table.assign(static_cast<size_t>(b.n_seqs) * b.max_blocks, -1);
  int next = 0;
  for (int s = 0; s < b.n_seqs; ++s)
    for (int k = 0; k < nb[s]; ++k)
      b.table[static_cast<size_t>(s) * b.max_blocks + k] = perm[next++];
  const int64_t n_slots = static_cast<int64_t>(b.n_blocks) * c.bs;
  const int64_t vec = static_cast<int64_t>(c.nkv) * c.D;  // elements per slot
  b.kpool.assign(static_cast<size_t>(n_slots * vec), kPoison);
  b.vpool.assign(static_cast<size_t>(n_slots * vec), kPoison);
  if (c.q8) {  // poisoned int8 (-128 never comes out of the quantizer) and NaN scales
    b.k8.assign(static_cast<size_t>(n_slots * vec), -128);
    b.v8.assign(static_cast<size_t>(n_slots * vec), -128);
    b.kscale.assign(static_cast<size_t>(n_slots * c.nkv * 4), kPoison);
    b.vscale.assign(static_cast<size_t>(n_slots * c.nkv * 4), kPoison);
  }
  for (int s = 0; s < b.n_seqs; ++s)
    for (int j = 0; j < b.kv_len[s]; ++j) {
      const int64_t slot = slot_of(b, c.bs, s, j);
      for (int64_t e = 0; e < vec; ++e) {
        b.kpool[static_cast<size_t>(slot * vec + e)] = f2t(uni(rng), c.bf16);
        b.vpool[static_cast<size_t>(slot * vec + e)] = f2t(uni(rng), c.bf16);
      }
      if (!c.q8) continue;
      for (int64_t blk = 0; blk < vec / 32; ++blk) {
        const size_t at = static_cast<size_t>(slot * vec + 32 * blk);
        const size_t rec =
            static_cast<size_t>((slot * c.nkv + blk / (c.D / 32)) * 4 + blk % (c.D / 32));
        float xk[32], xv[32];
        for (int i = 0; i < 32; ++i) {
          xk[i] = 3.f * t2f(b.kpool[at + i], c.bf16);  // |x| up to 3: scales above 1/64
          xv[i] = 3.f * t2f(b.vpool[at + i], c.bf16);
        }
        b.kscale[rec] = quantize_q8_block(xk, &b.k8[at], &b.kpool[at], c.bf16);
        b.vscale[rec] = quantize_q8_block(xv, &b.v8[at], &b.vpool[at], c.bf16);
      }
    }
  b.ldq = static_cast<int64_t>(c.nq + 2 * c.nkv) * c.D;  // fused QKV row
  b.qkv.resize(static_cast<size_t>(std::max(b.n_tokens, 1) * b.ldq));
  for (int t = 0; t < b.n_tokens; ++t)
    for (int64_t e = 0; e < b.ldq; ++e) {
      const float amp = e < static_cast<int64_t>(c.nq) * c.D ? c.q_amp : 1.f;
      b.qkv[static_cast<size_t>(t * b.ldq + e)] = f2t(amp * uni(rng), c.bf16);
    }
  return b;
}

/// fp64 reference: ref [n_tokens, nq * D], plain max-subtracted softmax.
inline std::vector<double> ref_attention(const AttnCase& c, const HostBatch& b, float scale) {
  const int G = c.nq / c.nkv, W = c.nq * c.D;
  std::vector<double> ref(static_cast<size_t>(b.n_tokens) * W, 0.0);
  std::vector<std::pair<int, int>> items;
  for (int s = 0; s < b.n_seqs; ++s)
    for (int i = 0; i < c.seqs[s].q_len; ++i) items.emplace_back(s, i);
  const int64_t vec = static_cast<int64_t>(c.nkv) * c.D;
  parallel_for(items.size(), [&](size_t it) {
    const int s = items[it].first, i = items[it].second;
    const int q_len = c.seqs[s].q_len, pos = b.kv_len[s] - q_len + i, n_keys = pos + 1;
    const int row = b.q_start[s] + i;
    std::vector<int64_t> slots(n_keys);
    for (int j = 0; j < n_keys; ++j) slots[j] = slot_of(b, c.bs, s, j);
    std::vector<double> sc(n_keys), qd(c.D), o(c.D);
    for (int h = 0; h < c.nq; ++h) {
      const int kvh = h / G;
      for (int d = 0; d < c.D; ++d)
        qd[d] = t2f(b.qkv[static_cast<size_t>(row * b.ldq + h * c.D + d)], c.bf16);
      double mx = -INFINITY;
      for (int j = 0; j < n_keys; ++j) {
        const u16* kp = &b.kpool[static_cast<size_t>(slots[j] * vec + kvh * c.D)];
        double dot = 0;
        for (int d = 0; d < c.D; ++d) dot += qd[d] * t2f(kp[d], c.bf16);
        sc[j] = dot * static_cast<double>(scale);
        mx = std::max(mx, sc[j]);
      }
      double sum = 0;
      std::fill(o.begin(), o.end(), 0.0);
      for (int j = 0; j < n_keys; ++j) {
        const double p = std::exp(sc[j] - mx);
        sum += p;
        const u16* vp = &b.vpool[static_cast<size_t>(slots[j] * vec + kvh * c.D)];
        for (int d = 0; d < c.D; ++d) o[d] += p * t2f(vp[d], c.bf16);
      }
      for (int d = 0; d < c.D; ++d) ref[static_cast<size_t>(row) * W + h * c.D + d] = o[d] / sum;
    }
  });
  return ref;
}

struct Tol {
  double rel_l2, abs_elem;
};
inline Tol attn_tol(bool bf16) {
  return bf16 ? Tol{1e-2, 2.5e-2} : Tol{2e-3, 4e-3};
}

struct Cmp {
  double max_abs = 0, rel_l2 = 0;
  int64_t nan = 0, bad = 0, first_bad = -1, pad_clobbered = 0;
  double ref_fb = 0, got_fb = 0;
};

inline Cmp compare_attention(const AttnCase& c, const HostBatch& b, const std::vector<u16>& out,
                             int64_t ldo, const std::vector<double>& ref, double abs_tol) {
  Cmp r;
  const int W = c.nq * c.D;
  double num = 0, den = 0;
  for (int t = 0; t < b.n_tokens; ++t) {
    for (int col = 0; col < W; ++col) {
      const float got = t2f(out[static_cast<size_t>(t * ldo + col)], c.bf16);
      const double rf = ref[static_cast<size_t>(t) * W + col];
      const double err = std::isnan(got) ? INFINITY : std::fabs(got - rf);
      if (std::isnan(got)) ++r.nan;
      if (!(err <= abs_tol)) {
        if (r.first_bad < 0) {
          r.first_bad = static_cast<int64_t>(t) * W + col;
          r.ref_fb = rf;
          r.got_fb = got;
        }
        ++r.bad;
      }
      if (std::isfinite(err)) {
        r.max_abs = std::max(r.max_abs, err);
        num += err * err;
      }
      den += rf * rf;
    }
    for (int64_t col = W; col < ldo; ++col)
      if (out[static_cast<size_t>(t * ldo + col)] != kPoison) ++r.pad_clobbered;
  }
  r.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (r.nan) r.rel_l2 = INFINITY;
  return r;
}

inline std::string seqs_str(const AttnCase& c) {
  std::string s;
  for (size_t i = 0; i < c.seqs.size() && i < 8; ++i)
    s += (i ? "," : "") + std::to_string(c.seqs[i].q_len) + "/" + std::to_string(c.seqs[i].ctx);
  if (c.seqs.size() > 8) s += ",...(" + std::to_string(c.seqs.size()) + " seqs)";
  return s;
}

/// On failure: per sequence (and which kernel handled it), the worst error and the first bad
/// element as (token i in seq, q head, dim).
inline void diagnose(const AttnCase& c, const HostBatch& b, const std::vector<u16>& out,
                     int64_t ldo, const std::vector<double>& ref, double abs_tol,
                     const PagedAttentionPlan& plan) {
  const int G = c.nq / c.nkv, W = c.nq * c.D;
  int printed = 0;
  for (int s = 0; s < b.n_seqs && printed < 12; ++s) {
    double mx = 0;
    int64_t bad = 0, nan = 0;
    int fi = -1, fh = -1, fd = -1;
    for (int i = 0; i < c.seqs[s].q_len; ++i)
      for (int col = 0; col < W; ++col) {
        const int t = b.q_start[s] + i;
        const float got = t2f(out[static_cast<size_t>(t * ldo + col)], c.bf16);
        const double err =
            std::isnan(got) ? INFINITY : std::fabs(got - ref[static_cast<size_t>(t) * W + col]);
        if (std::isnan(got)) ++nan;
        if (std::isfinite(err)) mx = std::max(mx, err);
        if (!(err <= abs_tol)) {
          if (bad == 0) {
            fi = i;
            fh = col / c.D;
            fd = col % c.D;
          }
          ++bad;
        }
      }
    if (bad == 0) continue;
    ++printed;
    const bool short_seq = static_cast<int64_t>(c.seqs[s].q_len) * G <= 16;
    const char* who = plan.split_kv && (!plan.prefill || short_seq) ? "split-KV" : "prefill";
    std::printf(
        "      seq %d (q_len %d, ctx %d, kv_len %d) [%s]: bad %lld nan %lld max_abs %.3g "
        "first bad at token %d head %d (kv head %d) dim %d\n",
        s, c.seqs[s].q_len, c.seqs[s].ctx, b.kv_len[s], who, (long long)bad, (long long)nan, mx, fi,
        fh, fh / G, fd);
  }
}

inline int g_failures = 0;
inline int g_cases = 0;

inline bool check_and_report(const char* tag, const AttnCase& c, const HostBatch& b, AttnPath path,
                             const PagedAttentionPlan& plan, const std::vector<u16>& out1,
                             const std::vector<u16>& out2, int64_t ldo,
                             const std::vector<double>& ref) {
  const Tol tol = attn_tol(c.bf16);
  const Cmp r = compare_attention(c, b, out1, ldo, ref, tol.abs_elem);
  int64_t nondet = 0;
  for (size_t i = 0; i < out1.size(); ++i) nondet += out1[i] != out2[i];
  const bool pass =
      r.nan == 0 && r.bad == 0 && r.rel_l2 <= tol.rel_l2 && r.pad_clobbered == 0 && nondet == 0;
  ++g_cases;
  if (!pass) ++g_failures;
  std::printf(
      "[%s] %s %s | %s D%d q%d/kv%d(G%d) bs%d seqs(q/ctx)=%s maxq=%d maxkv=%d | %s: "
      "split=%d(n_splits %d chunk %d) prefill=%d(skip<=%d) | max_abs %.3g (tol %.1g) "
      "rel_l2 %.3g (tol %.1g) nan %lld bad %lld pad_clobbered %lld nondet %lld",
      pass ? "PASS" : "FAIL", tag, c.name.c_str(), c.bf16 ? "bf16" : "fp16", c.D, c.nq, c.nkv,
      c.nq / c.nkv, c.bs, seqs_str(c).c_str(), c.q_bound ? c.q_bound : b.max_q,
      c.kv_bound ? c.kv_bound : b.max_kv, path_name(path), plan.split_kv, plan.n_splits, plan.chunk,
      plan.prefill, plan.prefill_skip_rows, r.max_abs, tol.abs_elem, r.rel_l2, tol.rel_l2,
      (long long)r.nan, (long long)r.bad, (long long)r.pad_clobbered, (long long)nondet);
  if (r.first_bad >= 0) {
    const int W = c.nq * c.D;
    std::printf(" first_bad(token %lld, head %lld, dim %lld) ref %.5f got %.5f",
                (long long)(r.first_bad / W), (long long)(r.first_bad % W / c.D),
                (long long)(r.first_bad % c.D), r.ref_fb, r.got_fb);
  }
  std::printf("\n");
  if (!pass) diagnose(c, b, out1, ldo, ref, tol.abs_elem, plan);
  std::fflush(stdout);
  return pass;
}

inline std::vector<SeqSpec> decode_seqs(std::initializer_list<int> ctx) {
  std::vector<SeqSpec> v;
  for (int x : ctx) v.push_back({1, x});
  return v;
}

/// Calls f(case, seed) for each case that --quick (`quick`: only cases marked quick) and --filter
/// (`filter` a substring of prefix + name; empty: all) select. Seeds run seed0 + 1, seed0 + 2, ...
/// over the whole list, so a case keeps its data whatever the filter.
template <typename Case, typename F>
void for_selected(const std::vector<Case>& cases, bool quick, const std::string& filter,
                  const std::string& prefix, uint64_t seed0, F&& f) {
  uint64_t seed = seed0;
  for (const Case& c : cases) {
    ++seed;
    if (quick && !c.quick) continue;
    if (!filter.empty() && (prefix + c.name).find(filter) == std::string::npos) continue;
    f(c, seed);
  }
}

inline std::vector<AttnCase> attention_cases() {
  std::vector<AttnCase> v;
  auto add = [&](AttnCase c) { v.push_back(std::move(c)); };
  // ---- a q8_0 cache (int8 + fp16 scale per 32): decode, prefill and a mixed batch
  {
    AttnCase c;
    c.name = "q8 cache decode G4 mixed lengths";
    c.q8 = true, c.quick = true;
    c.bf16 = true, c.D = 128, c.nq = 16, c.nkv = 4, c.bs = 16;
    c.seqs = decode_seqs({0, 70, 300, 1000, 63});
    add(c);
  }
  {
    AttnCase c;
    c.name = "q8 cache prefill + decode hd64";
    c.q8 = true, c.quick = true;
    c.bf16 = false, c.D = 64, c.nq = 8, c.nkv = 2, c.bs = 8;
    c.seqs = {{37, 0}, {1, 90}, {20, 45}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "q8 cache chunked prefill hd96";
    c.q8 = true;
    c.bf16 = false, c.D = 96, c.nq = 12, c.nkv = 4, c.bs = 16;
    c.seqs = {{70, 33}, {1, 130}};
    add(c);
  }
  // ---- decode (q_len = 1): the split-KV kernel under kAuto
  {
    AttnCase c;
    c.name = "decode G1 mixed lengths";
    c.bf16 = false, c.D = 128, c.nq = 8, c.nkv = 8, c.bs = 16;
    c.seqs = decode_seqs({0, 16, 299, 1000, 63, 64});
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode G4 bucketed 4096";
    c.bf16 = true, c.D = 128, c.nq = 16, c.nkv = 4, c.bs = 32;
    c.seqs = decode_seqs({2047, 5, 700, 128});
    c.kv_bound = 4096;
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode G8 hd64 bs8";
    c.bf16 = false, c.D = 64, c.nq = 32, c.nkv = 4, c.bs = 8;
    c.seqs = decode_seqs({100, 1, 513, 40, 900});
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode G2 hd80";
    c.bf16 = true, c.D = 80, c.nq = 8, c.nkv = 4, c.bs = 16;
    c.seqs = decode_seqs({77, 300, 1500});
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode G16 hd96";
    c.bf16 = false, c.D = 96, c.nq = 32, c.nkv = 2, c.bs = 16;
    c.seqs = decode_seqs({33, 250});
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode G1 sharp bs256";
    c.bf16 = true, c.D = 128, c.nq = 4, c.nkv = 4, c.bs = 256;
    c.seqs = decode_seqs({3000, 10});
    c.kv_bound = 4096;
    c.q_amp = 24.f;
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode G8 40 seqs bs64";
    c.bf16 = true, c.D = 64, c.nq = 8, c.nkv = 1, c.bs = 64;
    std::mt19937 rng(7);
    for (int i = 0; i < 40; ++i) c.seqs.push_back({1, static_cast<int>(rng() % 600)});
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode bound below real kv_len";
    c.bf16 = false, c.D = 128, c.nq = 4, c.nkv = 2, c.bs = 16;
    c.seqs = decode_seqs({900, 200, 130});
    c.kv_bound = 128;  // contract says >= real; the kernel's last split must still take the rest
    add(c);
  }
  {
    AttnCase c;
    c.name = "decode 96 seqs G4 (many CTAs)";
    c.bf16 = true, c.D = 128, c.nq = 8, c.nkv = 2, c.bs = 16;
    std::mt19937 rng(11);
    for (int i = 0; i < 96; ++i) c.seqs.push_back({1, static_cast<int>(rng() % 300)});
    c.kv_bound = 512;
    add(c);
  }
  // ---- several new tokens on the split-KV kernel: new keys spanning a split boundary or a later
  // tile, q_len * G = 16 with G = 1, a bucketed max_q (fused RoPE's table rows)
  {
    AttnCase c;
    c.name = "multi-token new keys across a split boundary G2 hd96 q8";
    c.q8 = true, c.bf16 = false, c.D = 96, c.nq = 8, c.nkv = 4, c.bs = 16;
    c.seqs = {{8, 124}, {8, 60}, {3, 1}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "multi-token new keys across a split boundary G2 hd80";
    c.bf16 = false, c.D = 80, c.nq = 8, c.nkv = 4, c.bs = 16;
    c.seqs = {{8, 124}, {6, 250}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "multi-token G1 q_len 16 hd128";
    c.bf16 = true, c.D = 128, c.nq = 2, c.nkv = 2, c.bs = 32;
    c.seqs = {{16, 120}, {16, 1000}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "multi-token G4 bucketed 2048";
    c.bf16 = true, c.D = 64, c.nq = 8, c.nkv = 2, c.bs = 16;
    c.seqs = {{2, 126}, {2, 3}};
    c.kv_bound = 2048;
    add(c);
  }
  // ---- prefill / chunked prefill / mixed (kAuto: prefill kernel + split-KV for short seqs)
  {
    AttnCase c;
    c.name = "prefill G1 fresh";
    c.bf16 = false, c.D = 128, c.nq = 8, c.nkv = 8, c.bs = 16;
    c.seqs = {{300, 0}, {5, 0}, {64, 0}, {129, 0}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "chunked G4 mixed";
    c.bf16 = true, c.D = 128, c.nq = 16, c.nkv = 4, c.bs = 32;
    c.seqs = {{200, 1000}, {1, 3000}, {17, 100}, {3, 50}, {4, 0}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "chunked G2 hd80 with q_len 0 seq";
    c.bf16 = false, c.D = 80, c.nq = 8, c.nkv = 4, c.bs = 32;
    c.seqs = {{150, 77}, {1, 5}, {8, 400}, {0, 30}, {33, 0}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "mixed G8 hd64 bs8";
    c.bf16 = true, c.D = 64, c.nq = 32, c.nkv = 4, c.bs = 8;
    c.seqs = {{100, 0}, {2, 60}, {1, 1}, {37, 200}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "prefill G3 hd96 (odd group)";
    c.bf16 = false, c.D = 96, c.nq = 12, c.nkv = 4, c.bs = 16;
    c.seqs = {{70, 10}, {5, 5}, {1, 90}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "mixed G16 hd128";
    c.bf16 = true, c.D = 128, c.nq = 32, c.nkv = 2, c.bs = 16;
    c.seqs = {{40, 20}, {1, 300}, {2, 50}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "multi-token split-KV G2 (q_len*G<=16)";
    c.bf16 = false, c.D = 128, c.nq = 8, c.nkv = 4, c.bs = 16;
    c.seqs = {{8, 500}, {3, 0}, {1, 2000}, {5, 64}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "chunked sharp G1";
    c.bf16 = true, c.D = 128, c.nq = 8, c.nkv = 8, c.bs = 16;
    c.seqs = {{256, 1800}, {33, 0}};
    c.q_amp = 24.f;
    add(c);
  }
  {
    AttnCase c;
    c.name = "prefill 512 G1 hd64";
    c.bf16 = false, c.D = 64, c.nq = 4, c.nkv = 4, c.bs = 16;
    c.seqs = {{512, 0}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "chunked G4 bs64";
    c.bf16 = true, c.D = 128, c.nq = 8, c.nkv = 2, c.bs = 64;
    c.seqs = {{130, 190}, {1, 129}, {64, 64}};
    add(c);
  }
  {
    AttnCase c;
    c.name = "chunked G2 bs128 bucketed max_q";
    c.bf16 = false, c.D = 128, c.nq = 4, c.nkv = 2, c.bs = 128;
    c.seqs = {{100, 300}, {20, 0}, {1, 700}};
    c.q_bound = 256;
    c.kv_bound = 1024;
    add(c);
  }
  {
    AttnCase c;
    c.name = "prefill G8 hd80 tiny";
    c.bf16 = true, c.D = 80, c.nq = 16, c.nkv = 2, c.bs = 16;
    c.seqs = {{3, 0}, {9, 7}};
    add(c);
  }
  // ---- tiny cases (--quick: sanitizers, emulator smoke test); every code path, few CTAs
  {
    AttnCase c;
    c.name = "tiny decode split-KV + reduce";
    c.bf16 = true, c.D = 80, c.nq = 4, c.nkv = 2, c.bs = 16;
    c.seqs = decode_seqs({70, 200, 0});
    c.quick = true;
    add(c);
  }
  {
    AttnCase c;
    c.name = "tiny mixed prefill + split-KV + q_len 0";
    c.bf16 = false, c.D = 128, c.nq = 4, c.nkv = 2, c.bs = 8;
    c.seqs = {{40, 30}, {1, 300}, {0, 9}, {5, 0}, {8, 70}};
    c.quick = true;
    add(c);
  }
  {
    AttnCase c;
    c.name = "tiny G8 hd64 chunked";
    c.bf16 = true, c.D = 64, c.nq = 16, c.nkv = 2, c.bs = 32;
    c.seqs = {{9, 60}, {2, 33}};
    c.quick = true;
    add(c);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// RoPE / norm / KV store

struct RopeCase {
  std::string name;
  bool bf16;
  int nq, nkv, hd, rot;
  bool interleaved, qnorm, knorm;
  float af;
  double theta;
  int n_tokens, pos_max;
  bool quick = false;
};

inline std::vector<RopeCase> rope_cases() {
  return {
      {"llama half-split", false, 8, 2, 128, 128, false, false, false, 1.f, 10000.0, 37, 5000},
      {"llama half-split bf16", true, 8, 2, 128, 128, false, false, false, 1.f, 500000.0, 37,
       131000},
      {"gguf interleaved partial + norms", true, 6, 3, 128, 64, true, true, true, 1.f, 10000.0, 29,
       4000, true},
      {"qwen3 norms half-split", false, 4, 4, 128, 128, false, true, true, 1.f, 1000000.0, 25,
       40000},
      {"partial half-split hd64 rot32 + q norm", true, 4, 2, 64, 32, false, true, false, 1.f,
       10000.0, 19, 3000},
      {"hd80 interleaved yarn factor", false, 8, 4, 80, 80, true, false, true, 1.2f, 10000.0, 23,
       9000},
      {"hd96 half-split partial rot48", true, 12, 4, 96, 48, false, false, false, 1.f, 10000.0, 21,
       2000},
      {"no rope (rot 0), store + k norm", false, 4, 2, 64, 0, false, false, true, 1.f, 10000.0, 9,
       100},
      {"hd256 half-split", true, 4, 1, 256, 256, false, true, true, 1.f, 10000.0, 11, 8000},
  };
}

/// Host inputs of a RoPE case: fused QKV rows [T, (nq + 2 nkv) * hd] in U(-2, 2), positions
/// (token 0 at pos_max), distinct shuffled slots with tokens 1 and T-1 marked -1 (not stored).
struct RopeData {
  int64_t ld = 0, n_slots = 0, vec = 0;
  std::vector<u16> qkv;
  std::vector<int32_t> pos, slots;
  std::vector<float> inv_freq, qw, kw;
  float eps = 1e-6f;
};

/// d's RoPE frequencies (inv_freq[i] = theta^(-2i / rot), HF's formula) and per-head norm weights
/// (q and k, head_dim each, uniform in [0.5, 1.5)).
inline void fill_rope_params(RopeData& d, int rot, double theta, int hd, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> wdist(0.5f, 1.5f);
  d.inv_freq.resize(rot / 2);
  for (int i = 0; i < rot / 2; ++i)
    d.inv_freq[i] = static_cast<float>(std::pow(theta, -2.0 * i / rot));
  d.qw.resize(hd);
  d.kw.resize(hd);
  for (auto& x : d.qw) x = wdist(rng);
  for (auto& x : d.kw) x = wdist(rng);
}

inline RopeData make_rope_data(const RopeCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-2.f, 2.f);
  RopeData d;
  const int T = c.n_tokens;
  d.ld = static_cast<int64_t>(c.nq + 2 * c.nkv) * c.hd;
  d.n_slots = static_cast<int64_t>(T) * 2 + 5;
  d.vec = static_cast<int64_t>(c.nkv) * c.hd;
  d.qkv.resize(static_cast<size_t>(T * d.ld));
  for (auto& x : d.qkv) x = f2t(uni(rng), c.bf16);
  d.pos.resize(T);
  d.slots.resize(T);
  std::vector<int64_t> perm(d.n_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < T; ++t) {
    d.pos[t] = static_cast<int32_t>(rng() % (c.pos_max + 1));
    d.slots[t] = static_cast<int32_t>(perm[t]);
  }
  if (T > 3) d.slots[1] = -1, d.slots[T - 1] = -1;  // padding tokens: not stored
  d.pos[0] = c.pos_max;
  fill_rope_params(d, c.rot, c.theta, c.hd, rng);
  return d;
}

/// Arguments for buffers holding RopeData's arrays (q, k, v are column views of qkv).
inline RopeKvArgs rope_args(const RopeCase& c, const RopeData& d, void* qkv, void* kc, void* vc,
                            const int32_t* pos, const int32_t* slots, const float* inv_freq,
                            const float* qw, const float* kw) {
  RopeKvArgs a;
  a.dtype = c.bf16 ? AttnDtype::kBF16 : AttnDtype::kF16;
  a.q = qkv;
  a.ldq = d.ld;
  a.k = static_cast<u16*>(qkv) + static_cast<int64_t>(c.nq) * c.hd;
  a.ldk = d.ld;
  a.v = static_cast<u16*>(qkv) + static_cast<int64_t>(c.nq + c.nkv) * c.hd;
  a.ldv = d.ld;
  a.k_cache = kc;
  a.v_cache = vc;
  a.n_slots = d.n_slots;
  a.positions = pos;
  a.slots = slots;
  a.n_tokens = c.n_tokens;
  a.n_q_heads = c.nq;
  a.n_kv_heads = c.nkv;
  a.head_dim = c.hd;
  a.rot_dim = c.rot;
  a.interleaved = c.interleaved;
  a.inv_freq = c.rot ? inv_freq : nullptr;
  a.attention_factor = c.af;
  a.q_norm = c.qnorm ? qw : nullptr;
  a.k_norm = c.knorm ? kw : nullptr;
  a.norm_eps = d.eps;
  return a;
}

/// Checks the kernel's results against an fp64 reference computed from the same T inputs (the
/// angle is the fp32 product float(pos) * inv_freq, as on the device): q (in place) and the k
/// cache within 1 ulp of T (+1e-5 absolute), the v cache bit-exact, the k/v columns of the fused
/// buffer unchanged, every slot not written still NaN. Prints one line; counts the case.
inline bool check_rope(const char* tag, const RopeCase& c, const RopeData& d,
                       const std::vector<u16>& qkv_out, const std::vector<u16>& kc,
                       const std::vector<u16>& vc) {
  const int T = c.n_tokens, hd = c.hd, half = c.rot / 2;
  auto ref_head = [&](const u16* x, const float* w, int p, std::vector<double>& y) {
    y.resize(hd);
    for (int e = 0; e < hd; ++e) y[e] = t2f(x[e], c.bf16);
    if (w) {
      double ss = 0;
      for (int e = 0; e < hd; ++e) ss += y[e] * y[e];
      const double inv = 1.0 / std::sqrt(ss / hd + d.eps);
      for (int e = 0; e < hd; ++e) y[e] = w[e] * (y[e] * inv);
    }
    std::vector<double> r = y;
    for (int i = 0; i < half; ++i) {
      const float ang = static_cast<float>(p) * d.inv_freq[i];
      const double cs = std::cos(static_cast<double>(ang)) * c.af;
      const double sn = std::sin(static_cast<double>(ang)) * c.af;
      const int ia = c.interleaved ? 2 * i : i, ib = c.interleaved ? 2 * i + 1 : i + half;
      r[ia] = y[ia] * cs - y[ib] * sn;
      r[ib] = y[ib] * cs + y[ia] * sn;
    }
    y = r;
  };
  const double rel = c.bf16 ? 1.0 / 128 : 1.0 / 1024, abs_tol = 1e-5;
  double worst_ulps = 0;
  int64_t bad = 0, nan = 0, k_bad = 0, v_bad = 0, kv_cols_changed = 0, stray = 0;
  std::string first;
  std::vector<double> y;
  std::vector<char> used(static_cast<size_t>(d.n_slots), 0);
  for (int t = 0; t < T; ++t) {
    const int64_t slot = d.slots[t];
    const bool stored = slot >= 0 && slot < d.n_slots;
    if (stored) used[static_cast<size_t>(slot)] = 1;
    for (int h = 0; h < c.nq + c.nkv; ++h) {
      const bool is_q = h < c.nq;
      if (!is_q && !stored) continue;
      const u16* x = &d.qkv[static_cast<size_t>(t * d.ld + static_cast<int64_t>(h) * hd)];
      ref_head(x, is_q ? (c.qnorm ? d.qw.data() : nullptr) : (c.knorm ? d.kw.data() : nullptr),
               d.pos[t], y);
      for (int e = 0; e < hd; ++e) {
        const u16 gu =
            is_q ? qkv_out[static_cast<size_t>(t * d.ld + static_cast<int64_t>(h) * hd + e)]
                 : kc[static_cast<size_t>((slot * c.nkv + (h - c.nq)) * hd + e)];
        const float got = t2f(gu, c.bf16);
        if (std::isnan(got)) ++nan;
        const double err = std::isnan(got) ? INFINITY : std::fabs(got - y[e]);
        worst_ulps = std::max(worst_ulps, err / (rel * std::max(std::fabs(y[e]), 1e-3)));
        if (!(err <= rel * std::fabs(y[e]) + abs_tol)) {
          ++bad;
          if (!is_q) ++k_bad;
          if (first.empty())
            first = "token " + std::to_string(t) + " pos " + std::to_string(d.pos[t]) + " " +
                    (is_q ? "q" : "k") + " head " + std::to_string(is_q ? h : h - c.nq) + " dim " +
                    std::to_string(e) + " ref " + std::to_string(y[e]) + " got " +
                    std::to_string(got);
        }
      }
    }
    for (int h = 0; h < c.nkv && stored; ++h)
      for (int e = 0; e < hd; ++e) {
        const u16 want =
            d.qkv[static_cast<size_t>(t * d.ld + static_cast<int64_t>(c.nq + c.nkv + h) * hd + e)];
        if (vc[static_cast<size_t>((slot * c.nkv + h) * hd + e)] != want) ++v_bad;
      }
    for (int64_t e = static_cast<int64_t>(c.nq) * hd; e < d.ld; ++e)
      if (qkv_out[static_cast<size_t>(t * d.ld + e)] != d.qkv[static_cast<size_t>(t * d.ld + e)])
        ++kv_cols_changed;
  }
  for (int64_t s = 0; s < d.n_slots; ++s)
    if (!used[static_cast<size_t>(s)])
      for (int64_t e = 0; e < d.vec; ++e)
        stray += (kc[static_cast<size_t>(s * d.vec + e)] != kPoison) +
                 (vc[static_cast<size_t>(s * d.vec + e)] != kPoison);
  const bool pass = bad == 0 && nan == 0 && v_bad == 0 && kv_cols_changed == 0 && stray == 0;
  ++g_cases;
  if (!pass) ++g_failures;
  std::printf(
      "[%s] %s %s | %s q%d kv%d hd%d rot%d %s qnorm%d knorm%d af %.2f tokens %d "
      "pos<=%d | bad %lld (k %lld) nan %lld worst %.2f ulp v_bad %lld k/v cols changed "
      "%lld stray cache writes %lld%s%s\n",
      pass ? "PASS" : "FAIL", tag, c.name.c_str(), c.bf16 ? "bf16" : "fp16", c.nq, c.nkv, hd, c.rot,
      c.interleaved ? "interleaved" : "half-split", c.qnorm, c.knorm, c.af, T, c.pos_max,
      (long long)bad, (long long)k_bad, (long long)nan, worst_ulps, (long long)v_bad,
      (long long)kv_cols_changed, (long long)stray,
      first.empty() ? "" : " first bad: ", first.c_str());
  std::fflush(stdout);
  return pass;
}

// ---------------------------------------------------------------------------------------------
// RoPE + KV store fused into the split-KV kernel (PagedAttentionArgs::rope)

/// Whether an attention case's batch can run fused: every sequence on the split-KV kernel.
inline bool fused_rope_applies(const AttnCase& c, const HostBatch& b) {
  return b.n_tokens > 0 && (c.q_bound ? c.q_bound : b.max_q) * (c.nq / c.nkv) <= 16;
}

/// A fused-RoPE run over an attention case's batch: the QKV projection's raw output (q | k | v,
/// row stride d.ld) and RoPE parameters as a RopeCase (a variant chosen by `seed`: half-split or
/// interleaved, full or partial rotation, Qwen3 norms, yarn's attention factor), with what
/// rope_norm_kv_store needs to do the same unfused: each token's position ctx + i and the cache
/// slot its block table gives.
struct FusedRope {
  RopeCase rc;
  RopeData d;
};

inline FusedRope make_fused_rope(const AttnCase& c, const HostBatch& b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-2.f, 2.f);
  FusedRope f;
  RopeCase& r = f.rc;
  r.name = c.name;
  r.bf16 = c.bf16;
  r.nq = c.nq, r.nkv = c.nkv, r.hd = c.D, r.rot = c.D;
  r.interleaved = false, r.qnorm = false, r.knorm = false;
  r.af = 1.f, r.theta = 10000.0;
  switch (seed % 4) {
    case 1:  // GGUF interleaved, partial rotation, both norms
      r.rot = (c.D / 2) & ~1, r.interleaved = true, r.qnorm = r.knorm = true;
      break;
    case 2:  // Qwen3
      r.qnorm = r.knorm = true, r.theta = 1000000.0;
      break;
    case 3:  // yarn-style factor, interleaved, k norm only
      r.interleaved = true, r.knorm = true, r.af = 1.2f;
      break;
    default:
      break;
  }
  r.n_tokens = b.n_tokens;
  r.pos_max = b.max_kv;
  RopeData& d = f.d;
  d.ld = static_cast<int64_t>(c.nq + 2 * c.nkv) * c.D + 8;
  d.n_slots = static_cast<int64_t>(b.n_blocks) * c.bs;
  d.vec = static_cast<int64_t>(c.nkv) * c.D;
  d.qkv.resize(static_cast<size_t>(b.n_tokens * d.ld));
  for (auto& x : d.qkv) x = f2t(uni(rng), c.bf16);
  for (int s = 0; s < b.n_seqs; ++s) {
    const int q_len = b.q_start[s + 1] - b.q_start[s], ctx = b.kv_len[s] - q_len;
    for (int i = 0; i < q_len; ++i) {
      d.pos.push_back(ctx + i);
      d.slots.push_back(static_cast<int32_t>(slot_of(b, c.bs, s, ctx + i)));
    }
  }
  fill_rope_params(d, r.rot, r.theta, c.D, rng);
  return f;
}

/// The fused kernel's RoPE arguments over buffers holding FusedRope's arrays (k, v: column views
/// of qkv).
inline AttnRopeArgs fused_rope_args(const FusedRope& f, void* qkv, const float* inv_freq,
                                    const float* qw, const float* kw) {
  const RopeCase& r = f.rc;
  AttnRopeArgs a;
  a.k = static_cast<u16*>(qkv) + static_cast<int64_t>(r.nq) * r.hd;
  a.ldk = f.d.ld;
  a.v = static_cast<u16*>(qkv) + static_cast<int64_t>(r.nq + r.nkv) * r.hd;
  a.ldv = f.d.ld;
  a.rot_dim = r.rot;
  a.interleaved = r.interleaved;
  a.inv_freq = r.rot ? inv_freq : nullptr;
  a.attention_factor = r.af;
  a.q_norm = r.qnorm ? qw : nullptr;
  a.k_norm = r.knorm ? kw : nullptr;
  a.norm_eps = f.d.eps;
  return a;
}

/// Sets the new tokens' cache rows (q8: int8 rows and scale records) back to poison: the values
/// the RoPE step must write before attention reads them.
inline void poison_new_rows(const AttnCase& c, HostBatch& b) {
  const int64_t vec = static_cast<int64_t>(c.nkv) * c.D;
  for (int s = 0; s < b.n_seqs; ++s)
    for (int j = b.kv_len[s] - (b.q_start[s + 1] - b.q_start[s]); j < b.kv_len[s]; ++j) {
      const int64_t slot = slot_of(b, c.bs, s, j);
      for (int64_t e = 0; e < vec; ++e) {
        b.kpool[static_cast<size_t>(slot * vec + e)] = kPoison;
        b.vpool[static_cast<size_t>(slot * vec + e)] = kPoison;
        if (c.q8)
          b.k8[static_cast<size_t>(slot * vec + e)] = b.v8[static_cast<size_t>(slot * vec + e)] =
              -128;
      }
      for (int64_t e = 0; c.q8 && e < c.nkv * 4; ++e)
        b.kscale[static_cast<size_t>(slot * c.nkv * 4 + e)] =
            b.vscale[static_cast<size_t>(slot * c.nkv * 4 + e)] = kPoison;
    }
}

/// What one run leaves behind: attention's output and the whole cache.
struct FusedOutcome {
  std::vector<u16> out, kpool, vpool, kscale, vscale;
  std::vector<int8_t> k8, v8;
};

/// The fused run must equal RoPE + KV store followed by attention bit for bit: out (every row and
/// padding gap) and every byte of the cache. Prints one line; counts the case.
inline bool check_fused(const char* tag, const AttnCase& c, const FusedRope& f,
                        const FusedOutcome& unfused, const FusedOutcome& fused) {
  auto diff = [](const auto& x, const auto& y) -> int64_t {
    if (x.size() != y.size()) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < x.size(); ++i) n += std::memcmp(&x[i], &y[i], sizeof(x[i])) != 0;
    return n;
  };
  int64_t nan = 0;
  for (u16 v : unfused.out) nan += v != kPoison && std::isnan(t2f(v, c.bf16));
  const int64_t d_out = diff(unfused.out, fused.out);
  const int64_t d_cache =
      c.q8 ? diff(unfused.k8, fused.k8) + diff(unfused.v8, fused.v8) +
                 diff(unfused.kscale, fused.kscale) + diff(unfused.vscale, fused.vscale)
           : diff(unfused.kpool, fused.kpool) + diff(unfused.vpool, fused.vpool);
  const bool pass = d_out == 0 && d_cache == 0 && nan == 0;
  ++g_cases;
  if (!pass) ++g_failures;
  std::printf(
      "[%s] %s %s | rot%d %s qnorm%d knorm%d af %.2f | out differs %lld, cache differs "
      "%lld, NaN in the unfused out %lld\n",
      pass ? "PASS" : "FAIL", tag, c.name.c_str(), f.rc.rot,
      f.rc.interleaved ? "interleaved" : "half-split", f.rc.qnorm, f.rc.knorm, f.rc.af,
      (long long)d_out, (long long)d_cache, (long long)nan);
  std::fflush(stdout);
  return pass;
}

}  // namespace attn_test
