// Tests and benchmarks of the CUDA linear kernels (src/backend/cuda/linear*.cu).
//
// Build (one command, from the repository root; tools/device/cuda_linear_kernels.sh does this):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude
//     tests/cuda/linear_kernels_test.cu src/backend/cuda/linear_{pack,gemv,gemm,dense,dispatch}.cu
//     src/core/{quantized,dtype,tensor}.cpp -lcublas -o linear_kernels_test
//
// Modes:
//   --host-only        layout round trips + a host emulation of the mma fragment data flow (no GPU)
//   (default)          host checks, then every GPU correctness case
//   --only FAMILY      GPU cases of one family: gemv, gemm, dense, w8, auto, graph
//   --quick            a reduced case set (for compute-sanitizer)
//   --bench            after the checks (or alone with --bench-only): timings of the Llama-2-7B and
//                      TinyLlama shapes, graphs of many launches over rotating weight copies
//
// Correctness: fp64 host reference y = Σ_k x·W (W from Int4Matrix::dequant / Int8Matrix::dequant,
// x as rounded to fp16/bf16) + bias; a case passes when ‖y − ref‖₂ / ‖ref‖₂ <= 2e-3 (fp16
// activations) or 1e-2 (bf16), no element is off by more than 8·tol·(|ref| + rms(ref)), every
// y[m, 0..N) was written (outputs are NaN-poisoned first) and nothing outside it changed (the
// columns N..ldy and the row M stay poisoned; x's padding columns and row M are NaN too, so a read
// outside x[0..M, 0..K) shows up as NaN). Exit code 1 when any case fails.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_frag.cuh"
#include "core/dtype.h"
#include "core/quantized.h"
#include "perfx/status.h"

using namespace perfx;
using namespace perfx::cuda;

namespace {

// ============================================================================ options, counters

struct Options {
  bool host_only = false, quick = false, bench = false, bench_only = false;
  bool bench_v3 = false;  // --bench-v3: only the w4_gemv3 configurations (and AUTO), M <= 8
  std::string only;       // empty = all GPU families
  std::string one_shape, one_kernel;  // --bench-one
  int one_m = 1, one_iters = 60;
};
Options g_opt;
int g_pass = 0, g_fail = 0;

bool family_on(const char* f) {
  return g_opt.only.empty() || g_opt.only == f;
}

const char* dt_name(DType t) {
  return t == DType::F16 ? "f16" : t == DType::BF16 ? "bf16" : t == DType::F32 ? "f32" : "?";
}

// ============================================================================ random data

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint32_t u32() { return (uint32_t)g(); }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  float normal() { return std::normal_distribution<float>(0.f, 1.f)(g); }
};

/// Random int4 part: all nibbles random, scales in ±[0.004, 0.03] (sign random for GGUF-style,
/// whose d may be negative), zeros random (AWQ) or 8 (GGUF Q4_0).
Int4Matrix random_int4(int64_t out, int64_t in, int gs, Rng& r, bool gguf) {
  Int4Matrix m;
  m.out = out;
  m.in = in;
  m.group_size = gs;
  m.q.resize((size_t)(out * in / 8));
  for (auto& w : m.q) w = r.u32();
  const size_t G = (size_t)(out * (in / gs));
  m.scales.resize(G);
  m.zeros.resize(G);
  for (size_t i = 0; i < G; ++i) {
    float s = r.uniform(0.004f, 0.03f);
    if (gguf && (r.u32() & 1)) s = -s;
    m.scales[i] = fp32_to_fp16(s);
    m.zeros[i] = gguf ? 8 : (uint8_t)r.uniform_int(0, 15);
  }
  return m;
}

Int8Matrix random_int8(int64_t out, int64_t in, int gs, Rng& r) {
  Int8Matrix m;
  m.out = out;
  m.in = in;
  m.group_size = gs;
  m.q.resize((size_t)(out * in));
  for (auto& q : m.q) q = (int8_t)r.uniform_int(-128, 127);
  m.scales.resize((size_t)(out * (in / gs)));
  for (auto& s : m.scales) s = fp32_to_fp16(r.uniform(0.0005f, 0.004f) * ((r.u32() & 1) ? 1 : -1));
  return m;
}

/// Stacked dense W [N][K] in fp32, by the canonical dequant formulas.
std::vector<float> dense_of(const std::vector<Int4Matrix>& parts) {
  int64_t N = 0;
  for (auto& p : parts) N += p.out;
  const int64_t K = parts[0].in;
  std::vector<float> w((size_t)(N * K));
  int64_t r0 = 0;
  for (auto& p : parts) {
    for (int64_t r = 0; r < p.out; ++r)
      for (int64_t k = 0; k < K; ++k) w[(size_t)((r0 + r) * K + k)] = p.dequant(r, k);
    r0 += p.out;
  }
  return w;
}
std::vector<float> dense_of(const std::vector<Int8Matrix>& parts) {
  int64_t N = 0;
  for (auto& p : parts) N += p.out;
  const int64_t K = parts[0].in;
  std::vector<float> w((size_t)(N * K));
  int64_t r0 = 0;
  for (auto& p : parts) {
    for (int64_t r = 0; r < p.out; ++r)
      for (int64_t k = 0; k < K; ++k) w[(size_t)((r0 + r) * K + k)] = p.dequant(r, k);
    r0 += p.out;
  }
  return w;
}

uint16_t to_bits(DType t, float v) {
  return t == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
}
float from_bits(DType t, uint16_t b) {
  return t == DType::F16 ? fp16_to_fp32(b) : bf16_to_fp32(b);
}
uint16_t nan_bits(DType t) {
  return t == DType::F16 ? 0x7E00 : 0x7FC0;
}

/// Activations [M, K] with row stride ld, plus a poisoned row M and poisoned columns K..ld.
struct HostX {
  DType dt = DType::F16;
  int M = 0;
  int64_t K = 0, ld = 0;
  std::vector<uint16_t> bits;  // (M + 1) * ld
  std::vector<double> val;     // M * K, the rounded values
};

HostX make_x(DType dt, int M, int64_t K, int64_t ld, Rng& r, float offset = 0.f) {
  HostX x;
  x.dt = dt;
  x.M = M;
  x.K = K;
  x.ld = ld;
  x.bits.assign((size_t)((M + 1) * ld), nan_bits(dt));
  x.val.resize((size_t)(M * K));
  for (int m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      float v = r.normal() + offset;
      if (std::fabs(v) < 1e-3f) v = 0.5f;  // no zeros
      const uint16_t b = to_bits(dt, v);
      x.bits[(size_t)(m * ld + k)] = b;
      x.val[(size_t)(m * K + k)] = from_bits(dt, b);
    }
  return x;
}

std::vector<float> make_bias(int64_t N, Rng& r) {
  std::vector<float> b((size_t)N);
  for (auto& v : b) v = r.uniform(-0.5f, 0.5f);
  return b;
}

/// ref[m*N + n] = Σ_k x[m,k]·W[n,k] (+ bias[n]) in fp64, threads over n.
std::vector<double> reference(const std::vector<float>& W, int64_t N, int64_t K, const HostX& x,
                              const std::vector<float>* bias) {
  std::vector<double> ref((size_t)(x.M * N));
  const int nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (int t = 0; t < nt; ++t)
    th.emplace_back([&, t] {
      for (int64_t n = t; n < N; n += nt) {
        const float* w = W.data() + n * K;
        for (int m = 0; m < x.M; ++m) {
          const double* xv = x.val.data() + (size_t)m * K;
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += xv[k] * (double)w[k];
          if (bias) s += (*bias)[(size_t)n];
          ref[(size_t)(m * N + n)] = s;
        }
      }
    });
  for (auto& t : th) t.join();
  return ref;
}

// ============================================================================ comparison

struct Compare {
  double rel = 0, max_abs = 0, ref_rms = 0;
  int64_t n_nan = 0, n_outside = 0, n_bad = 0;
  std::string detail;
  bool pass = false;
};

double read_y(const std::vector<uint8_t>& y, DType t, size_t i) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, y.data() + 4 * i, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, y.data() + 2 * i, 2);
  return from_bits(t, b);
}

bool is_poison(const std::vector<uint8_t>& y, DType t, size_t i) {
  const size_t es = t == DType::F32 ? 4 : 2;
  for (size_t b = 0; b < es; ++b)
    if (y[es * i + b] != 0xFF) return false;
  return true;
}

/// Compares y [(M+1) rows, ldy] (poisoned with 0xFF bytes before the run) with ref [M, N].
Compare compare(const std::vector<uint8_t>& y, DType yt, int M, int64_t N, int64_t ldy,
                const std::vector<double>& ref, double tol) {
  Compare c;
  double se = 0, sr = 0;
  for (size_t i = 0; i < ref.size(); ++i) sr += ref[i] * ref[i];
  c.ref_rms = std::sqrt(sr / std::max<size_t>(1, ref.size()));
  std::vector<int64_t> bad_by_row16(16, 0), bad_by_m(8, 0);
  std::string first;
  char buf[256];
  for (int m = 0; m <= M; ++m)
    for (int64_t n = 0; n < ldy; ++n) {
      const size_t i = (size_t)(m * ldy + n);
      if (m == M || n >= N) {
        if (!is_poison(y, yt, i)) {
          if (c.n_outside++ == 0) {
            std::snprintf(buf, sizeof buf, " first write outside at (m=%d,n=%lld);", m,
                          (long long)n);
            first += buf;
          }
        }
        continue;
      }
      const double v = read_y(y, yt, i), r = ref[(size_t)(m * N + n)];
      if (!std::isfinite(v)) {
        if (c.n_nan++ == 0) {
          std::snprintf(buf, sizeof buf, " first unwritten/NaN at (m=%d,n=%lld);", m, (long long)n);
          first += buf;
        }
        bad_by_row16[(size_t)(n % 16)]++;
        bad_by_m[(size_t)std::min(m, 7)]++;
        continue;
      }
      const double e = v - r;
      se += e * e;
      c.max_abs = std::max(c.max_abs, std::fabs(e));
      if (std::fabs(e) > 8 * tol * (std::fabs(r) + c.ref_rms)) {
        if (c.n_bad++ < 3) {
          std::snprintf(buf, sizeof buf, " bad (m=%d,n=%lld) got %.6g ref %.6g;", m, (long long)n,
                        v, r);
          first += buf;
        }
        bad_by_row16[(size_t)(n % 16)]++;
        bad_by_m[(size_t)std::min(m, 7)]++;
      }
    }
  c.rel = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
  c.pass = c.n_nan == 0 && c.n_outside == 0 && c.n_bad == 0 && c.rel <= tol;
  if (!c.pass) {
    char b2[512];
    std::snprintf(b2, sizeof b2, " nan/unwritten=%lld outside=%lld bad=%lld;", (long long)c.n_nan,
                  (long long)c.n_outside, (long long)c.n_bad);
    c.detail = std::string(b2) + first;
    if (c.n_nan + c.n_bad > 0) {
      c.detail += " bad by n%16:";
      for (auto v : bad_by_row16) c.detail += " " + std::to_string(v);
      c.detail += " | by m(0..6,7+):";
      for (auto v : bad_by_m) c.detail += " " + std::to_string(v);
    }
  }
  return c;
}

void report(const std::string& what, const Compare& c, double tol) {
  if (c.pass)
    ++g_pass;
  else
    ++g_fail;
  std::printf("%s %-86s rel %.2e max|err| %.2e (tol %.0e)%s\n", c.pass ? "PASS" : "FAIL",
              what.c_str(), c.rel, c.max_abs, tol, c.detail.c_str());
  std::fflush(stdout);
}

void report_simple(bool ok, const std::string& what, const std::string& detail = "") {
  if (ok)
    ++g_pass;
  else
    ++g_fail;
  std::printf("%s %s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.c_str());
  std::fflush(stdout);
}

// ============================================================================ host-only checks

struct W4Shape {
  std::vector<int64_t> parts;
  int64_t K;
  int gs;
  bool gguf;
};

std::string shape_str(const W4Shape& s) {
  std::string p;
  int64_t N = 0;
  for (size_t i = 0; i < s.parts.size(); ++i) {
    p += (i ? "+" : "") + std::to_string(s.parts[i]);
    N += s.parts[i];
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, "N=%lld(%s) K=%lld g%d%s", (long long)N, p.c_str(), (long long)s.K,
                s.gs, s.gguf ? " q4_0" : "");
  return buf;
}

std::vector<Int4Matrix> make_parts(const W4Shape& s, Rng& r) {
  std::vector<Int4Matrix> parts;
  for (int64_t o : s.parts) parts.push_back(random_int4(o, s.K, s.gs, r, s.gguf));
  return parts;
}

std::vector<const Int4Matrix*> ptrs(const std::vector<Int4Matrix>& v) {
  std::vector<const Int4Matrix*> p;
  for (auto& m : v) p.push_back(&m);
  return p;
}
std::vector<const Int8Matrix*> ptrs(const std::vector<Int8Matrix>& v) {
  std::vector<const Int8Matrix*> p;
  for (auto& m : v) p.push_back(&m);
  return p;
}

/// Every element read back from the packed image equals the canonical one; padding is zero.
/// (Which record kind pack_w4 picks is test_cuda_host's W4Pack.)
void host_pack_roundtrip(const W4Shape& s, Rng& r) {
  auto parts = make_parts(s, r);
  const W4Packed p = pack_w4(ptrs(parts));
  int64_t bad = 0, bad_dq = 0, r0 = 0;
  for (auto& m : parts) {
    for (int64_t lr = 0; lr < m.out; ++lr)
      for (int64_t k = 0; k < s.K; ++k) {
        if (w4_packed_value(p, r0 + lr, k) != m.value(lr, k)) ++bad;
        if (w4_packed_dequant(p, r0 + lr, k) != m.dequant(lr, k)) ++bad_dq;
      }
    r0 += m.out;
  }
  int64_t bad_pad = 0;
  for (int64_t r2 = 0; r2 < (int64_t)p.d.NB * 16; ++r2)
    for (int64_t k = 0; k < (int64_t)p.d.KC * 64; ++k)
      if ((r2 >= p.d.N || k >= p.d.K) && w4_packed_value(p, r2, k) != 0) ++bad_pad;
  report_simple(bad == 0 && bad_dq == 0 && bad_pad == 0,
                "host pack_w4 round trip " + shape_str(s) + (p.d.sym ? " sym" : ""),
                bad + bad_dq + bad_pad
                    ? " value mismatches " + std::to_string(bad) + ", dequant " +
                          std::to_string(bad_dq) + ", padding " + std::to_string(bad_pad)
                    : "");
}

/// W4RowOrder::kInterleave8 (gate|up for the SwiGLU epilogue): row lr of part p lands in packed
/// row 16·(lr / 8) + 8p + lr % 8, and the order's preconditions are enforced.
void host_pack_interleave(int64_t I, int64_t K, int gs, Rng& r) {
  const W4Shape s{{I, I}, K, gs, false};
  auto parts = make_parts(s, r);
  const W4Packed p = pack_w4(ptrs(parts), W4RowOrder::kInterleave8);
  int64_t bad = 0;
  for (int pi = 0; pi < 2; ++pi)
    for (int64_t lr = 0; lr < I; ++lr)
      for (int64_t k = 0; k < K; ++k)
        if (w4_packed_value(p, w4_interleave_row(pi, lr), k) != parts[(size_t)pi].value(lr, k) ||
            w4_packed_dequant(p, w4_interleave_row(pi, lr), k) != parts[(size_t)pi].dequant(lr, k))
          ++bad;
  auto rejects = [&](std::vector<int64_t> outs) {
    auto q = make_parts(W4Shape{outs, K, gs, false}, r);
    try {
      (void)pack_w4(ptrs(q), W4RowOrder::kInterleave8);
    } catch (const Error&) {
      return true;
    }
    return false;
  };
  const bool rej = rejects({I, I + 8}) && rejects({I + 4, I + 4}) && rejects({I});
  report_simple(bad == 0 && rej,
                "host pack_w4 interleave8 I=" + std::to_string(I) + " K=" + std::to_string(K),
                bad   ? " mismatches " + std::to_string(bad)
                : rej ? ""
                      : " bad shapes accepted");
}

void host_pack8_roundtrip(const std::vector<int64_t>& outs, int64_t K, Rng& r) {
  std::vector<Int8Matrix> parts;
  for (int64_t o : outs) parts.push_back(random_int8(o, K, 32, r));
  const W8Packed p = pack_w8(ptrs(parts));
  int64_t bad = 0, r0 = 0;
  for (auto& m : parts) {
    for (int64_t lr = 0; lr < m.out; ++lr)
      for (int64_t k = 0; k < K; ++k)
        if (w8_packed_value(p, r0 + lr, k) != m.q[(size_t)(lr * K + k)]) ++bad;
    r0 += m.out;
  }
  report_simple(bad == 0,
                "host pack_w8 round trip N=" + std::to_string(p.d.N) + " K=" + std::to_string(K),
                bad ? " mismatches " + std::to_string(bad) : "");
}

/// mma.m16n8k16 (row.col) from per-lane fragments, by the PTX ISA fragment layout (§9.7.14.5.8):
/// A: a0,a1 (reg 0) row gid, cols 2tid,+1; reg 1 row gid+8; reg 2 row gid, cols 2tid+8,+9; reg 3
/// row gid+8, cols 2tid+8,+9. B: reg 0 rows 2tid,+1, col gid; reg 1 rows 2tid+8,+9. C: c0,c1 row
/// gid, cols 2tid,+1; c2,c3 row gid+8. Elements are fp16 or bf16 (low half first).
void emu_mma(const uint32_t a[32][4], const uint32_t b[32][2], double c[32][4], bool bf16) {
  auto h = [&](uint32_t v, int hi) {
    const uint16_t bits = (uint16_t)(hi ? v >> 16 : v & 0xFFFF);
    return (double)(bf16 ? bf16_to_fp32(bits) : fp16_to_fp32(bits));
  };
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 2; ++i) {
      A[g][2 * t + i] = h(a[l][0], i);
      A[g + 8][2 * t + i] = h(a[l][1], i);
      A[g][2 * t + 8 + i] = h(a[l][2], i);
      A[g + 8][2 * t + 8 + i] = h(a[l][3], i);
      B[2 * t + i][g] = h(b[l][0], i);
      B[2 * t + 8 + i][g] = h(b[l][1], i);
    }
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int ci = 0; ci < 4; ++ci) {
      const int row = g + 8 * (ci >> 1), col = 2 * t + (ci & 1);
      double s = 0;
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      c[l][ci] += s;
    }
  }
}

/// Host emulation of the kernels' fragment data flow (W4): for every row block / chunk / half /
/// k-tile, the 32 lanes' A fragments come from the packed words through the same frag:: helpers
/// the kernels use, B fragments from x by the kernels' addressing (16 bytes at
/// x[gid][64kc + 32h + 8tid]), the mma by the PTX layout; `scaled` applies the scale to the
/// fragment first (the GEMM's way), else to the fp32 partial (the GEMV's way).
void host_emulate_w4(const W4Shape& s, DType xt, int M, bool scaled, Rng& r) {
  auto parts = make_parts(s, r);
  const W4Packed p = pack_w4(ptrs(parts));
  const HostX x = make_x(xt, M, s.K, s.K + 8, r);
  const auto W = dense_of(parts);
  const auto ref = reference(W, p.d.N, p.d.K, x, nullptr);
  const bool bf16 = xt == DType::BF16;
  std::vector<double> y((size_t)(M * p.d.N), 0.0);
  auto xword = [&](int m, int64_t k) -> uint32_t {  // halves x[m][k], x[m][k+1]; 0 beyond M / K
    if (m >= M || k >= s.K) return 0;
    return (uint32_t)x.bits[(size_t)(m * x.ld + k)] | (uint32_t)x.bits[(size_t)(m * x.ld + k + 1)]
                                                          << 16;
  };
  for (int64_t nb = 0; nb < p.d.NB; ++nb) {
    double acc[32][4] = {};
    for (int64_t kc = 0; kc < p.d.KC; ++kc)
      for (int hh = 0; hh < 2; ++hh) {
        const int64_t hc = 2 * kc + hh;
        double cp[32][4] = {};
        uint32_t zl[32], zh[32], sl[32], sh[32];
        double s_lo[32], s_hi[32];
        for (int l = 0; l < 32; ++l) {
          const int64_t idx = frag::w4_rec_index(p.d.G, p.d.gs_shift, p.d.sym, nb, hc, l >> 2);
          const uint2 rec = frag::w4_rec_of_half(
              make_uint2(p.sz[(size_t)(2 * idx)], p.sz[(size_t)(2 * idx + 1)]), p.d.sym, hc);
          const uint32_t rx = rec.x, ry = rec.y;
          const uint32_t z0 = ry & 0xF, z1 = (ry >> 8) & 0xF;
          zl[l] = bf16 ? frag::bf16_neg_zero(z0) : frag::f16_neg_zero_lo(z0);
          zh[l] = bf16 ? frag::bf16_neg_zero(z1) : frag::f16_neg_zero_hi(z1);
          s_lo[l] = fp16_to_fp32((uint16_t)(rx & 0xFFFF));
          s_hi[l] = fp16_to_fp32((uint16_t)(rx >> 16));
          const uint16_t b_lo = bf16 ? fp32_to_bf16((float)s_lo[l]) : (uint16_t)(rx & 0xFFFF);
          const uint16_t b_hi = bf16 ? fp32_to_bf16((float)s_hi[l]) : (uint16_t)(rx >> 16);
          sl[l] = b_lo | (uint32_t)b_lo << 16;
          sh[l] = b_hi | (uint32_t)b_hi << 16;
        }
        for (int jj = 0; jj < 2; ++jj) {
          uint32_t a[32][4], b[32][2];
          for (int l = 0; l < 32; ++l) {
            const int gid = l >> 2, tid = l & 3;
            const uint32_t word =
                p.q[(size_t)(frag::w4_q_index(p.d.KC, nb, kc, l) * 4 + 2 * hh + jj)];
            if (bf16)
              frag::w4_word_to_frag_bf16(word, zl[l], zh[l], a[l]);
            else
              frag::w4_word_to_frag_f16(word, zl[l], zh[l], a[l]);
            if (scaled)
              for (int i = 0; i < 4; ++i)
                a[l][i] = bf16 ? frag::bf16x2_mul(a[l][i], (i & 1) ? sh[l] : sl[l])
                               : frag::f16x2_mul(a[l][i], (i & 1) ? sh[l] : sl[l]);
            const int64_t k0 = 64 * kc + 32 * hh + 8 * tid + 4 * jj;  // == w4_base(kc, 2hh+jj, tid)
            b[l][0] = xword(gid, k0);
            b[l][1] = xword(gid, k0 + 2);
          }
          emu_mma(a, b, scaled ? acc : cp, bf16);
        }
        if (!scaled)
          for (int l = 0; l < 32; ++l)
            for (int i = 0; i < 4; ++i) acc[l][i] += (i < 2 ? s_lo[l] : s_hi[l]) * cp[l][i];
      }
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int64_t row = nb * 16 + (l >> 2) + 8 * (i >> 1);
        const int tok = 2 * (l & 3) + (i & 1);
        if (row < p.d.N && tok < M) y[(size_t)(tok * p.d.N + row)] = acc[l][i];
      }
  }
  double se = 0, sr = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    se += (y[i] - ref[i]) * (y[i] - ref[i]);
    sr += ref[i] * ref[i];
  }
  const double rel = std::sqrt(se / sr);
  // Unscaled: exact products, fp64 sums: only the order differs (~1e-15). Scaled: one rounding of
  // the weight to fp16 (2^-11) or bf16 (scale and product, 2^-8 each).
  const double tol = scaled ? (bf16 ? 1e-2 : 2e-3) : 1e-9;
  char buf[160];
  std::snprintf(buf, sizeof buf, "host emulation w4 %s %s M=%d x=%s%s", scaled ? "gemm" : "gemv",
                shape_str(s).c_str(), M, dt_name(xt), p.d.sym ? " sym" : "");
  Compare c;
  c.rel = rel;
  c.pass = rel <= tol;
  report(buf, c, tol);
}

/// Host emulation of w4_gemv2's folded data flow: per flush unit (a whole group, or a half-chunk
/// for group 32) the A fragments come from frag::w4_word_to_frag_fold (no zero, conversion offset
/// kept), the mma sums them (PTX layout, exact), then acc += s·A·c − s·(B + z)·X with X the
/// unit's activation sum per token, A/B from frag::fold_scale / fold_offset: the algebra and
/// constants of the kernel's correction, exact up to fp64 rounding.
void host_emulate_w4_fold(const W4Shape& s, DType xt, int conv, int M, Rng& r) {
  auto parts = make_parts(s, r);
  const W4Packed p = pack_w4(ptrs(parts));
  if (p.d.sym) {  // w4_gemv2 does not take symmetric records (w4_gemv2_fits says no)
    std::printf("SKIP host emulation w4 gemv2 %s: symmetric records\n", shape_str(s).c_str());
    return;
  }
  const HostX x = make_x(xt, M, s.K, s.K + 8, r);
  const auto W = dense_of(parts);
  const auto ref = reference(W, p.d.N, p.d.K, x, nullptr);
  const bool bf16 = xt == DType::BF16;
  std::vector<double> y((size_t)(M * p.d.N), 0.0);
  auto xword = [&](int m, int64_t k) -> uint32_t {
    if (m >= M || k >= s.K) return 0;
    return (uint32_t)x.bits[(size_t)(m * x.ld + k)] | (uint32_t)x.bits[(size_t)(m * x.ld + k + 1)]
                                                          << 16;
  };
  const bool pair = p.d.gs_shift == 0;
  const int cpg = pair ? 1 : 1 << (p.d.gs_shift - 1);
  // Flush units: (first chunk, chunk count, k-tile mask, group index).
  struct Unit {
    int64_t kc0, nkc;
    int jmask;
    int64_t g;
  };
  std::vector<Unit> units;
  if (pair) {
    for (int64_t kc = 0; kc < p.d.KC; ++kc)
      for (int h = 0; h < 2; ++h) units.push_back({kc, 1, 3 << (2 * h), 2 * kc + h});
  } else {
    for (int64_t kc = 0; kc < p.d.KC; kc += cpg)
      units.push_back({kc, std::min<int64_t>(cpg, p.d.KC - kc), 15, kc / cpg});
  }
  for (int64_t nb = 0; nb < p.d.NB; ++nb) {
    double acc[32][4] = {};
    for (const Unit& un : units) {
      double cp[32][4] = {};
      for (int64_t kc = un.kc0; kc < un.kc0 + un.nkc; ++kc)
        for (int j = 0; j < 4; ++j) {
          if (!((un.jmask >> j) & 1)) continue;
          uint32_t a[32][4], b[32][2];
          for (int l = 0; l < 32; ++l) {
            const int gid = l >> 2, tid = l & 3;
            const uint32_t word = p.q[(size_t)(frag::w4_q_index(p.d.KC, nb, kc, l) * 4 + j)];
            frag::w4_word_to_frag_fold(conv, word, a[l]);
            const int64_t k0 = frag::w4_base(kc, j, tid);
            b[l][0] = xword(gid, k0);
            b[l][1] = xword(gid, k0 + 2);
          }
          emu_mma(a, b, cp, bf16);
        }
      // X per token over the unit's channels (x beyond K is zero, as staged).
      double X[8] = {};
      const int64_t k_begin = 64 * un.kc0 + (pair ? 32 * (un.jmask == 12) : 0);
      const int64_t k_end = pair ? k_begin + 32 : 64 * (un.kc0 + un.nkc);
      for (int m = 0; m < M; ++m)
        for (int64_t k = k_begin; k < std::min<int64_t>(k_end, s.K); ++k)
          X[m] += x.val[(size_t)(m * s.K + k)];
      for (int l = 0; l < 32; ++l) {
        const int64_t idx = frag::w4_sz_index(p.d.G, nb, un.g, l >> 2);
        const uint32_t rx = p.sz[(size_t)(2 * idx)], ry = p.sz[(size_t)(2 * idx + 1)];
        for (int i = 0; i < 4; ++i) {
          const int hi = i >> 1;
          const float sc = fp16_to_fp32((uint16_t)(hi ? rx >> 16 : rx & 0xFFFF));
          const float z = (float)((ry >> (8 * hi)) & 0xF);
          const float sa = sc * frag::fold_scale(conv, hi);
          const float sb = sc * (frag::fold_offset(conv, hi) + z);
          const int tok = 2 * (l & 3) + (i & 1);
          acc[l][i] += (double)sa * cp[l][i] - (double)sb * (tok < M ? X[tok] : 0.0);
        }
      }
    }
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int64_t row = nb * 16 + (l >> 2) + 8 * (i >> 1);
        const int tok = 2 * (l & 3) + (i & 1);
        if (row < p.d.N && tok < M) y[(size_t)(tok * p.d.N + row)] = acc[l][i];
      }
  }
  double se = 0, sr = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    se += (y[i] - ref[i]) * (y[i] - ref[i]);
    sr += ref[i] * ref[i];
  }
  Compare c;
  c.rel = std::sqrt(se / sr);
  c.pass = c.rel <= 1e-9;
  const char* cn = conv == frag::kFoldSubF16     ? "f16-subnormal"
                   : conv == frag::kFoldMagicF16 ? "f16-magic"
                                                 : "bf16-magic";
  char buf[200];
  std::snprintf(buf, sizeof buf, "host emulation w4 gemv2 (folded zero, %s) %s M=%d", cn,
                shape_str(s).c_str(), M);
  report(buf, c, 1e-9);
}

/// Host emulation of the W8 GEMV fragment flow.
void host_emulate_w8(int64_t N, int64_t K, DType xt, int M, Rng& r) {
  std::vector<Int8Matrix> parts{random_int8(N, K, 32, r)};
  const W8Packed p = pack_w8(ptrs(parts));
  const HostX x = make_x(xt, M, K, K + 8, r);
  const auto W = dense_of(parts);
  const auto ref = reference(W, N, K, x, nullptr);
  const bool bf16 = xt == DType::BF16;
  std::vector<double> y((size_t)(M * N), 0.0);
  auto xword = [&](int m, int64_t k) -> uint32_t {
    if (m >= M || k >= K) return 0;
    return (uint32_t)x.bits[(size_t)(m * x.ld + k)] | (uint32_t)x.bits[(size_t)(m * x.ld + k + 1)]
                                                          << 16;
  };
  for (int64_t nb = 0; nb < p.d.NB; ++nb) {
    double acc[32][4] = {};
    for (int64_t kc = 0; kc < p.d.KC; ++kc) {
      double cp[32][4] = {};
      for (int jj = 0; jj < 2; ++jj) {
        uint32_t a[32][4], b[32][2];
        for (int l = 0; l < 32; ++l) {
          const int gid = l >> 2, tid = l & 3;
          const int64_t qi = frag::w8_q_index(p.d.KC, nb, kc, l) * 4;
          const uint32_t w0 = p.q[(size_t)(qi + 2 * jj)], w1 = p.q[(size_t)(qi + 2 * jj + 1)];
          if (bf16) {
            frag::w8_word_to_bf16x2(w0, a[l][0], a[l][1]);
            frag::w8_word_to_bf16x2(w1, a[l][2], a[l][3]);
          } else {
            frag::w8_word_to_f16x2(w0, a[l][0], a[l][1]);
            frag::w8_word_to_f16x2(w1, a[l][2], a[l][3]);
          }
          const int64_t k0 = frag::w8_base(kc, jj, tid);
          b[l][0] = xword(gid, k0);
          b[l][1] = xword(gid, k0 + 2);
        }
        emu_mma(a, b, cp, bf16);
      }
      for (int l = 0; l < 32; ++l) {
        const uint32_t rec = p.s[(size_t)frag::w8_s_index(p.d.G, nb, kc >> p.d.gs_shift, l >> 2)];
        for (int i = 0; i < 4; ++i)
          acc[l][i] += fp16_to_fp32((uint16_t)(i < 2 ? rec & 0xFFFF : rec >> 16)) * cp[l][i];
      }
    }
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int64_t row = nb * 16 + (l >> 2) + 8 * (i >> 1);
        const int tok = 2 * (l & 3) + (i & 1);
        if (row < N && tok < M) y[(size_t)(tok * N + row)] = acc[l][i];
      }
  }
  double se = 0, sr = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    se += (y[i] - ref[i]) * (y[i] - ref[i]);
    sr += ref[i] * ref[i];
  }
  Compare c;
  c.rel = std::sqrt(se / sr);
  c.pass = c.rel <= 1e-9;
  char buf[160];
  std::snprintf(buf, sizeof buf, "host emulation w8 gemv N=%lld K=%lld M=%d x=%s", (long long)N,
                (long long)K, M, dt_name(xt));
  report(buf, c, 1e-9);
}

/// The bit conversions in isolation: every nibble / byte value and zero through the helpers.
void host_conversions() {
  int64_t bad = 0;
  for (uint32_t z = 0; z < 16; ++z)
    for (uint32_t q = 0; q < 16; ++q) {
      // A word whose 8 nibbles are all q: every fragment half must be q − z.
      const uint32_t w = q * 0x11111111u;
      uint32_t a[4];
      frag::w4_word_to_frag_f16(w, frag::f16_neg_zero_lo(z), frag::f16_neg_zero_hi(z), a);
      for (int i = 0; i < 4; ++i)
        for (int hi = 0; hi < 2; ++hi)
          if (fp16_to_fp32((uint16_t)(a[i] >> (16 * hi))) != (float)q - (float)z) ++bad;
      frag::w4_word_to_frag_bf16(w, frag::bf16_neg_zero(z), frag::bf16_neg_zero(z), a);
      for (int i = 0; i < 4; ++i)
        for (int hi = 0; hi < 2; ++hi)
          if (bf16_to_fp32((uint16_t)(a[i] >> (16 * hi))) != (float)q - (float)z) ++bad;
    }
  for (int q = -128; q < 128; ++q) {
    const uint32_t u = (uint32_t)(uint8_t)q ^ 0x80u;
    const uint32_t w = u * 0x01010101u;
    uint32_t lo, hi;
    frag::w8_word_to_f16x2(w, lo, hi);
    for (uint32_t v : {lo, hi})
      for (int h = 0; h < 2; ++h)
        if (fp16_to_fp32((uint16_t)(v >> (16 * h))) != (float)q) ++bad;
    frag::w8_word_to_bf16x2(w, lo, hi);
    for (uint32_t v : {lo, hi})
      for (int h = 0; h < 2; ++h)
        if (bf16_to_fp32((uint16_t)(v >> (16 * h))) != (float)q) ++bad;
  }
  report_simple(bad == 0, "host int4/int8 -> fp16/bf16 fragment conversions (all values)",
                bad ? " mismatches " + std::to_string(bad) : "");
  // Folded conversions: every element v of a word whose nibbles are all q must satisfy
  // A_r·v − B_r == q for its row half r (fold_scale / fold_offset).
  int64_t bad_fold = 0;
  for (int conv : {(int)frag::kFoldMagicF16, (int)frag::kFoldSubF16, (int)frag::kFoldMagicBf16})
    for (uint32_t q = 0; q < 16; ++q) {
      uint32_t a[4];
      frag::w4_word_to_frag_fold(conv, q * 0x11111111u, a);
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          const uint16_t bits = (uint16_t)(a[i] >> (16 * h));
          const double v = conv == frag::kFoldMagicBf16 ? bf16_to_fp32(bits) : fp16_to_fp32(bits);
          const int hi = i & 1;  // A regs 1, 3: rows gid + 8
          if (v * frag::fold_scale(conv, hi) - frag::fold_offset(conv, hi) != (double)q) ++bad_fold;
        }
    }
  report_simple(bad_fold == 0, "host int4 folded-zero conversions (f16 magic / subnormal, bf16)",
                bad_fold ? " mismatches " + std::to_string(bad_fold) : "");
}

void host_checks() {
  Rng r(1234);
  host_conversions();
  const std::vector<W4Shape> shapes = {
      {{40, 24, 8}, 96, 32, true},     {{136}, 640, 128, false},       {{200, 56}, 1088, 64, false},
      {{8}, 256, 256, false},          {{24, 24, 24}, 4128, 32, true}, {{40, 24, 8}, 96, 32, false},
      {{24, 24, 24}, 4128, 32, false},
  };
  for (auto& s : shapes) host_pack_roundtrip(s, r);
  host_pack_interleave(40, 256, 128, r);
  host_pack_interleave(8, 96, 32, r);
  host_pack8_roundtrip({40, 24}, 96, r);
  host_pack8_roundtrip({200}, 1088, r);
  for (auto& s : shapes) {
    for (DType xt : {DType::F16, DType::BF16})
      for (bool scaled : {false, true}) host_emulate_w4(s, xt, scaled ? 8 : 3, scaled, r);
  }
  for (auto& s : shapes) {
    host_emulate_w4_fold(s, DType::F16, frag::kFoldMagicF16, 3, r);
    host_emulate_w4_fold(s, DType::F16, frag::kFoldSubF16, 8, r);
    host_emulate_w4_fold(s, DType::BF16, frag::kFoldMagicBf16, 5, r);
  }
  host_emulate_w8(72, 96, DType::F16, 5, r);
  host_emulate_w8(200, 1088, DType::BF16, 8, r);
}

// ============================================================================ GPU helpers

struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  DevBuf() = default;
  explicit DevBuf(size_t bytes) : n(bytes) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(n, o.n);
    return *this;
  }
};

size_t dsize(DType t) {
  return t == DType::F32 ? 4 : 2;
}

struct DevX {
  DevBuf buf;
  explicit DevX(const HostX& x) : buf(x.bits.size() * 2) {
    CUDA_CHECK(cudaMemcpy(buf.p, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
  }
};

cudaStream_t g_stream = nullptr;
cublasHandle_t g_cublas = nullptr;
DevBuf* g_cublas_ws = nullptr;

/// The DenseGemm the backend would supply: cuBLAS GemmEx (fp32 compute) + add_bias.
void cublas_dense(void* ctx, const void* w, int64_t N, int64_t K, const void* x, DType xt, int M,
                  int64_t ldx, void* y, DType yt, int64_t ldy, const float* bias,
                  cudaStream_t stream) {
  (void)ctx;
  if (cublasSetStream(g_cublas, stream) != CUBLAS_STATUS_SUCCESS) throw Error("cublasSetStream");
  const float alpha = 1.f, beta = 0.f;
  const cudaDataType_t ab = xt == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;
  const cudaDataType_t ct = yt == DType::F32 ? CUDA_R_32F : ab;
  // Column-major view: Yᵀ [N, M] (ld ldy) = W [K, N]ᵀ (ld K) · Xᵀ [K, M] (ld ldx).
  const cublasStatus_t st =
      cublasGemmEx(g_cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, M, (int)K, &alpha, w, ab, (int)K, x,
                   ab, (int)ldx, &beta, y, ct, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) throw Error("cublasGemmEx failed: " + std::to_string((int)st));
  add_bias(y, yt, ldy, M, N, bias, stream);
}
DenseGemm g_dense{cublas_dense, nullptr};

/// Poisons y ((M+1) rows of ldy), runs `launch(y)`, synchronizes, returns y's bytes.
std::vector<uint8_t> run_y(const std::function<void(void*)>& launch, DType yt, int M, int64_t ldy) {
  const size_t bytes = (size_t)(M + 1) * ldy * dsize(yt);
  DevBuf y(bytes);
  CUDA_CHECK(cudaMemset(y.p, 0xFF, bytes));
  launch(y.p);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(g_stream));
  std::vector<uint8_t> h(bytes);
  CUDA_CHECK(cudaMemcpy(h.data(), y.p, bytes, cudaMemcpyDeviceToHost));
  return h;
}

double tol_for(DType xt) {
  return xt == DType::F16 ? 2e-3 : 1e-2;
}

/// One (weight, M, x dtype, bias) problem with its reference; runs several kernels on it.
struct Problem {
  std::string shape;
  int64_t N = 0, K = 0;
  int M = 0;
  DType xt = DType::F16;
  HostX hx;
  std::unique_ptr<DevX> dx;
  std::vector<float> bias;
  std::unique_ptr<DevBuf> dbias;
  std::vector<double> ref;

  Problem(const std::string& shape_, const std::vector<float>& W, int64_t N_, int64_t K_, int M_,
          DType xt_, bool with_bias, int64_t ldx, Rng& r, float x_offset = 0.f)
      : shape(shape_), N(N_), K(K_), M(M_), xt(xt_) {
    hx = make_x(xt, M, K, ldx, r, x_offset);
    dx = std::make_unique<DevX>(hx);
    if (with_bias) {
      bias = make_bias(N, r);
      dbias = std::make_unique<DevBuf>(bias.size() * 4);
      CUDA_CHECK(cudaMemcpy(dbias->p, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
    }
    ref = reference(W, N, K, hx, with_bias ? &bias : nullptr);
  }
  const float* b() const { return dbias ? static_cast<const float*>(dbias->p) : nullptr; }

  /// Runs `launch(y, ldy)` with output dtype yt and checks it.
  void check(const std::string& kernel, DType yt, int64_t ldy,
             const std::function<void(void*, int64_t)>& launch) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-22s %s M=%d x=%s y=%s%s ldx=%lld ldy=%lld", kernel.c_str(),
                  shape.c_str(), M, dt_name(xt), dt_name(yt), dbias ? " bias" : "",
                  (long long)hx.ld, (long long)ldy);
    try {
      const auto y = run_y([&](void* p) { launch(p, ldy); }, yt, M, ldy);
      Compare c = compare(y, yt, M, N, ldy, ref, tol_for(xt));
      // Same inputs, fresh poisoned output: the kernels are deterministic (no atomics), so any
      // difference is a race or a read of unwritten memory.
      const auto y2 = run_y([&](void* p) { launch(p, ldy); }, yt, M, ldy);
      if (y2 != y) {
        c.pass = false;
        c.detail += " NONDETERMINISTIC: a second run differs;";
      }
      report(buf, c, tol_for(xt));
    } catch (const std::exception& e) {
      report_simple(false, buf, std::string(" exception: ") + e.what());
      (void)cudaGetLastError();  // clear a non-sticky error
      const cudaError_t st = cudaDeviceSynchronize();
      if (st != cudaSuccess)  // sticky (e.g. an illegal address): nothing more can run here
        throw Error(std::string("sticky CUDA error after this case: ") + cudaGetErrorString(st));
    }
  }
};

// ============================================================================ GPU cases

std::vector<W4Shape> w4_shapes() {
  if (g_opt.quick)
    return {{{40, 24, 8}, 96, 32, true},
            {{40, 24, 8}, 96, 32, false},
            {{200, 56}, 1088, 64, false},
            {{8}, 256, 256, false}};
  return {
      {{40, 24, 8}, 96, 32, true},      // N not a multiple of 16, K % 64 = 32, Q4_0-like (sym)
      {{40, 24, 8}, 96, 32, false},     // the same with random zeros (a record pair per chunk)
      {{136}, 640, 128, false},         // one part, K = 5 groups
      {{200, 56}, 1088, 64, false},     // K = 17 chunks
      {{8}, 256, 256, false},           // N < 16, group 256
      {{48}, 1536, 512, false},         // group 512 (w4_gemv3's largest)
      {{24, 24, 24}, 4128, 32, true},   // K % 64 = 32, long K, Q4_0-like (sym)
      {{24, 24, 24}, 4128, 32, false},  // the same, asymmetric
      {{1000}, 2048, 128, false},       // N = 1000 (62.5 row blocks)
      {{4096}, 4096, 128, false},       // Llama o_proj size
  };
}

std::vector<int> ms_for(const W4Shape& s, bool gemv) {
  const int64_t N = [&] {
    int64_t n = 0;
    for (auto v : s.parts) n += v;
    return n;
  }();
  const double cost = (double)N * s.K;  // MACs per token of the reference
  std::vector<int> all = gemv ? std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}
                              : std::vector<int>{1, 9, 17, 33, 64, 100, 257, 512};
  if (g_opt.quick) all = gemv ? std::vector<int>{1, 3, 8} : std::vector<int>{9, 33, 100};
  std::vector<int> r;
  for (int m : all)
    if (cost * m <= 1.2e9 || m <= 8 || (cost * m <= 6e9 && m <= 33)) r.push_back(m);
  return r;
}

/// Rotating (output dtype, bias) choices so every kernel sees every combination.
DType out_for(DType xt, int i) {
  return (i & 1) ? DType::F32 : xt;
}

void gpu_w4_cases() {
  Rng r(42);
  int combo = 0;
  for (const W4Shape& s : w4_shapes()) {
    auto parts = make_parts(s, r);
    const W4Weight w = W4Weight::from_parts(ptrs(parts));
    const auto W = dense_of(parts);
    const W4View& v = w.view();
    const std::string sh = shape_str(s);

    if (family_on("dense")) {
      // Bit-exact dequantization with a padded leading dimension (padding must stay poisoned).
      for (DType dt : {DType::F16, DType::BF16}) {
        const int64_t ldd = v.d.K + 8;
        const size_t bytes = (size_t)(v.d.N + 1) * ldd * 2;
        DevBuf d(bytes);
        CUDA_CHECK(cudaMemset(d.p, 0xFF, bytes));
        w4_dequantize(v, d.p, dt, ldd, g_stream);
        CUDA_CHECK(cudaStreamSynchronize(g_stream));
        std::vector<uint16_t> h(bytes / 2);
        CUDA_CHECK(cudaMemcpy(h.data(), d.p, bytes, cudaMemcpyDeviceToHost));
        int64_t bad = 0, outside = 0;
        std::string first;
        for (int64_t n = 0; n <= v.d.N; ++n)
          for (int64_t k = 0; k < ldd; ++k) {
            const uint16_t got = h[(size_t)(n * ldd + k)];
            if (n == v.d.N || k >= v.d.K) {
              outside += got != 0xFFFF;
              continue;
            }
            const uint16_t want = to_bits(dt, W[(size_t)(n * v.d.K + k)]);
            if (got != want && bad++ == 0)
              first = " first (n=" + std::to_string(n) + ",k=" + std::to_string(k) + ") got " +
                      std::to_string(got) + " want " + std::to_string(want);
          }
        report_simple(bad == 0 && outside == 0,
                      std::string("w4_dequantize          ") + sh + " dt=" + dt_name(dt),
                      bad || outside ? " mismatches " + std::to_string(bad) + " outside " +
                                           std::to_string(outside) + first
                                     : " (bit-exact)");
      }
    }

    if (family_on("gemv")) {
      for (int M : ms_for(s, true))
        for (DType xt : {DType::F16, DType::BF16}) {
          const int i = combo++;
          Problem pb(sh, W, v.d.N, v.d.K, M, xt, (i / 2) & 1, v.d.K + 8 * (i % 3), r);
          const int warps = (i % 5 == 0) ? 4 : (i % 5 == 1) ? 16 : 8;
          for (int x_smem : {1, 0}) {
            // Mirrors linear_gemv.cu's choice, for the label only.
            const bool xs = x_smem != 0 && (int64_t)M * (64 * v.d.KC + 32) * 2 <= 96 * 1024;
            pb.check(std::string("w4_gemv/") + std::to_string(warps) + "w/" + (xs ? "xs" : "regs") +
                         (v.d.sym             ? "/g32sym"
                          : v.d.gs_shift == 0 ? "/g32"
                                              : ""),
                     out_for(xt, i + x_smem), v.d.N + (i % 4), [&](void* y, int64_t ldy) {
                       w4_gemv(v, pb.dx->buf.p, xt, M, pb.hx.ld, y, out_for(xt, i + x_smem), ldy,
                               pb.b(), g_stream, warps, x_smem);
                     });
          }
        }
    }

    if (family_on("gemv")) {
      // w4_gemv2 (M <= 16): configurations rotate over (warps, rows per CTA incl. persistent,
      // fp16 conversion, PDL launch); M = 1..8 shares the problems above in kind, M = 9..16 uses
      // two n8 token tiles; the last problem has activations offset by +3 (all x > 0 mostly: the
      // largest Σx, the magic conversion's worst case).
      std::vector<int> ms2 =
          g_opt.quick ? std::vector<int>{1, 3, 13} : std::vector<int>{1, 2, 3, 5, 8, 9, 12, 16};
      for (int M : ms2)
        for (DType xt : {DType::F16, DType::BF16}) {
          if ((double)v.d.N * v.d.K * M > 1.2e9 && M > 1) continue;
          const int i = combo++;
          const float x_off = (M == ms2.back() && xt == DType::F16) ? 3.f : 0.f;
          Problem pb(sh + (x_off != 0.f ? " x+3" : ""), W, v.d.N, v.d.K, M, xt, (i / 2) & 1,
                     v.d.K + 8 * (i % 3), r, x_off);
          struct C2 {
            int warps, rpc;
            bool sub, pdl;
          };
          const C2 cfgs[] = {{0, 0, false, false},
                             {4, 2, true, false},
                             {8, -1, false, true},
                             {4, 3, (i & 1) != 0, (i % 3) == 0}};
          int ci = 0;
          for (const C2& c2 : cfgs) {
            const int k = ci++;
            if (!w4_gemv2_fits(v, M, c2.warps == 0 ? 8 : c2.warps)) {
              std::printf("SKIP w4_gemv2 %s M=%d: %s\n", sh.c_str(), M,
                          v.d.sym ? "symmetric records" : "staged x does not fit");
              continue;
            }
            W4Gemv2Config cfg;
            cfg.warps = c2.warps;
            cfg.rows_per_cta = c2.rpc;
            cfg.f16_subnormal = c2.sub && xt == DType::F16;
            cfg.pdl = c2.pdl;
            const W4Gemv2Config def = w4_gemv2_default_config(v, M);
            char lab[96];
            std::snprintf(lab, sizeof lab, "w4_gemv2/%dw/r%d/%s%s%s",
                          c2.warps ? c2.warps : def.warps, c2.rpc ? c2.rpc : def.rows_per_cta,
                          xt == DType::BF16   ? "bf16"
                          : cfg.f16_subnormal ? "sub"
                                              : "magic",
                          cfg.pdl ? "/pdl" : "", v.d.gs_shift == 0 ? "/g32" : "");
            const DType yt = out_for(xt, i + k);
            pb.check(lab, yt, v.d.N + ((i + k) % 4), [&](void* y, int64_t ldy) {
              w4_gemv2(v, pb.dx->buf.p, xt, M, pb.hx.ld, y, yt, ldy, pb.b(), g_stream, cfg);
            });
          }
        }
    }

    if (family_on("gemv")) {
      // w4_gemv3 (M <= 8): splits 1/2/4/8 and the default rule, a small grid cap (several tasks
      // per CTA: the ring crosses row blocks and segments), PDL launch.
      for (int M : ms_for(s, true))
        for (DType xt : {DType::F16, DType::BF16}) {
          const int i = combo++;
          const float x_off = (M == 8 && xt == DType::F16) ? 3.f : 0.f;
          Problem pb(sh + (x_off != 0.f ? " x+3" : ""), W, v.d.N, v.d.K, M, xt, (i / 2) & 1,
                     v.d.K + 8 * (i % 3), r, x_off);
          struct C3 {
            int split, cap;
            bool pdl;
          };
          const C3 cfgs[] = {{0, 0, false}, {1, 3, false}, {2, 0, (i % 3) == 0},
                             {4, 2, false}, {8, 0, true},  {8, 1, false}};
          int ci = 0;
          for (const C3& c3 : cfgs) {
            const int k = ci++;
            // --quick (the compute-sanitizer run) keeps the default and both capped configs,
            // so memcheck sees the ring cross row blocks and the barrier buffers reused.
            if (g_opt.quick && (k == 1 || k == 2 || k == 4)) continue;
            W4Gemv3Config cfg;
            cfg.split = c3.split;
            cfg.grid_cap = c3.cap;
            cfg.pdl = c3.pdl;
            char lab[96];
            std::snprintf(lab, sizeof lab, "w4_gemv3/s%d/cap%d/%s%s/g%d%s",
                          c3.split ? c3.split : w4_gemv3_default_split(v, M), c3.cap,
                          xt == DType::BF16 ? "bf16" : "f16", cfg.pdl ? "/pdl" : "", v.d.group_size,
                          v.d.sym ? "sym" : "");
            const DType yt = out_for(xt, i + k);
            pb.check(lab, yt, v.d.N + ((i + k) % 4), [&](void* y, int64_t ldy) {
              w4_gemv3(v, pb.dx->buf.p, xt, M, pb.hx.ld, y, yt, ldy, pb.b(), g_stream, cfg);
            });
          }
          if (M == 1 && xt == DType::F16) {  // argument errors: a clear perfx::Error, no launch
            DevBuf yb((size_t)9 * v.d.N * 4);
            auto rejects = [&](int m, int split) {
              W4Gemv3Config c;
              c.split = split;
              try {
                w4_gemv3(v, pb.dx->buf.p, xt, m, pb.hx.ld, yb.p, DType::F32, v.d.N, nullptr,
                         g_stream, c);
              } catch (const Error&) {
                return true;
              }
              return false;
            };
            report_simple(rejects(1, 3) && rejects(9, 0) && rejects(1, -2),
                          "w4_gemv3 rejects split 3, M = 9, split -2 " + sh);
          }
        }
    }

    if (family_on("gemm")) {
      for (int M : ms_for(s, false))
        for (DType xt : {DType::F16, DType::BF16}) {
          const int i = combo++;
          Problem pb(sh, W, v.d.N, v.d.K, M, xt, (i / 2) & 1, v.d.K + 8 * (i % 3), r);
          for (W4GemmTile tile :
               {W4GemmTile::S32, W4GemmTile::S64, W4GemmTile::L128, W4GemmTile::L128R}) {
            const int auto_split = w4_gemm_split_k(v, tile, M);
            std::vector<int> splits{auto_split};
            if (tile != W4GemmTile::L128 && tile != W4GemmTile::L128R && auto_split == 1 &&
                v.d.KC >= 3)
              splits.push_back(3);
            if (tile == W4GemmTile::S32 && auto_split != 1) splits.push_back(1);
            for (int sk : splits) {
              const DType yt = out_for(xt, i + (int)tile + sk);
              const size_t wsb = w4_gemm_workspace_bytes(v, M, sk);
              DevBuf ws(wsb);
              pb.check(std::string(w4_gemm_tile_name(tile)) + "/split" + std::to_string(sk), yt,
                       v.d.N + ((i + sk) % 3), [&](void* y, int64_t ldy) {
                         w4_gemm(v, tile, sk, pb.dx->buf.p, xt, M, pb.hx.ld, y, yt, ldy, pb.b(),
                                 ws.p, wsb, g_stream);
                       });
            }
          }
        }
    }

    if (family_on("auto")) {
      // The dispatcher (with the cuBLAS dense path for M >= w4_dense_min_m()).
      std::vector<int> ms{1, 5, 9, 40, 100, 300};
      if (g_opt.quick) ms = {1, 40};
      for (int M : ms) {
        if ((double)v.d.N * v.d.K * M > 2e9) continue;
        for (bool with_dense : {true, false}) {
          const int i = combo++;
          const DType xt = (i & 1) ? DType::BF16 : DType::F16;
          Problem pb(sh, W, v.d.N, v.d.K, M, xt, (i / 2) & 1, v.d.K, r);
          const DType yt = out_for(xt, i / 2);
          const size_t wsb = linear_workspace_bytes(w, M, with_dense);
          DevBuf ws(wsb);
          const LinearPlan plan = w4a16_plan(v, M, with_dense);
          pb.check(std::string("auto:") + linear_kernel_name(plan.kernel) + "/s" +
                       std::to_string(plan.split_k),
                   yt, v.d.N, [&](void* y, int64_t ldy) {
                     linear_w4a16(w, pb.dx->buf.p, xt, M, pb.hx.ld, y, yt, ldy, pb.b(),
                                  Workspace{ws.p, wsb}, g_stream, with_dense ? &g_dense : nullptr);
                   });
        }
      }
    }
  }
}

void gpu_w8_cases() {
  Rng r(77);
  struct S8 {
    std::vector<int64_t> parts;
    int64_t K;
  };
  std::vector<S8> shapes = {{{40, 24}, 96}, {{136}, 640}, {{24, 24, 24}, 4128}, {{1000}, 2048}};
  if (g_opt.quick) shapes = {{{40, 24}, 96}, {{136}, 640}};
  int combo = 0;
  for (const S8& s : shapes) {
    std::vector<Int8Matrix> parts;
    int64_t N = 0;
    for (int64_t o : s.parts) {
      parts.push_back(random_int8(o, s.K, 32, r));
      N += o;
    }
    const W8Weight w = W8Weight::from_parts(ptrs(parts));
    const auto W = dense_of(parts);
    const W8View& v = w.view();
    const std::string sh = "N=" + std::to_string(N) + " K=" + std::to_string(s.K) + " q8_0";
    for (DType dt : {DType::F16, DType::BF16}) {
      const int64_t ldd = s.K + 16;
      const size_t bytes = (size_t)(N + 1) * ldd * 2;
      DevBuf d(bytes);
      CUDA_CHECK(cudaMemset(d.p, 0xFF, bytes));
      w8_dequantize(v, d.p, dt, ldd, g_stream);
      CUDA_CHECK(cudaStreamSynchronize(g_stream));
      std::vector<uint16_t> h(bytes / 2);
      CUDA_CHECK(cudaMemcpy(h.data(), d.p, bytes, cudaMemcpyDeviceToHost));
      int64_t bad = 0, outside = 0;
      for (int64_t n = 0; n <= N; ++n)
        for (int64_t k = 0; k < ldd; ++k) {
          const uint16_t got = h[(size_t)(n * ldd + k)];
          if (n == N || k >= s.K)
            outside += got != 0xFFFF;
          else
            bad += got != to_bits(dt, W[(size_t)(n * s.K + k)]);
        }
      report_simple(bad == 0 && outside == 0, "w8_dequantize          " + sh + " dt=" + dt_name(dt),
                    bad || outside ? " mismatches " + std::to_string(bad) + " outside " +
                                         std::to_string(outside)
                                   : " (bit-exact)");
    }
    std::vector<int> ms{1, 2, 3, 4, 5, 6, 7, 8, 20};
    if (g_opt.quick) ms = {1, 8, 20};
    for (int M : ms)
      for (DType xt : {DType::F16, DType::BF16}) {
        const int i = combo++;
        Problem pb(sh, W, N, s.K, M, xt, (i / 2) & 1, s.K + 8 * (i % 2), r);
        const DType yt = out_for(xt, i);
        if (M <= 8)
          for (int x_smem : {1, 0})
            pb.check(std::string("w8_gemv/") + (x_smem ? "xs-if-fits" : "regs"), yt, N + (i % 3),
                     [&](void* y, int64_t ldy) {
                       w8_gemv(v, pb.dx->buf.p, xt, M, pb.hx.ld, y, yt, ldy, pb.b(), g_stream,
                               i % 3 == 0 ? 16 : 8, x_smem);
                     });
        for (bool with_dense : {false, true}) {
          if (M <= 8 && with_dense) continue;
          const size_t wsb = linear_workspace_bytes(w, M, with_dense);
          DevBuf ws(wsb);
          const LinearPlan plan = w8a16_plan(v, M, with_dense);
          pb.check(std::string("w8 auto:") + linear_kernel_name(plan.kernel), yt, N,
                   [&](void* y, int64_t ldy) {
                     linear_w8a16(w, pb.dx->buf.p, xt, M, pb.hx.ld, y, yt, ldy, pb.b(),
                                  Workspace{ws.p, wsb}, g_stream, with_dense ? &g_dense : nullptr);
                   });
        }
      }
  }
}

/// The dispatcher captured into a CUDA graph (global capture mode: any unsafe call inside the
/// launch path fails the capture) and replayed twice.
void gpu_graph_cases() {
  Rng r(99);
  const W4Shape s{{200, 56}, 1088, 64, false};
  auto parts = make_parts(s, r);
  const W4Weight w = W4Weight::from_parts(ptrs(parts));
  const auto W = dense_of(parts);
  for (int M : {1, 17, 50, 100, 300}) {
    const DType xt = M % 2 ? DType::F16 : DType::BF16;
    Problem pb(shape_str(s), W, w.out(), w.in(), M, xt, true, w.in(), r);
    const size_t wsb = linear_workspace_bytes(w, M, true);
    DevBuf ws(wsb);
    const DType yt = DType::F32;
    const LinearPlan plan = w4a16_plan(w.view(), M, true);
    pb.check(std::string("graph:") + linear_kernel_name(plan.kernel), yt, w.out(),
             [&](void* y, int64_t ldy) {
               cudaGraph_t graph = nullptr;
               cudaGraphExec_t exec = nullptr;
               CUDA_CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
               try {
                 linear_w4a16(w, pb.dx->buf.p, xt, M, pb.hx.ld, y, yt, ldy, pb.b(),
                              Workspace{ws.p, wsb}, g_stream, &g_dense);
               } catch (...) {
                 cudaStreamEndCapture(g_stream, &graph);
                 if (graph) cudaGraphDestroy(graph);
                 throw;
               }
               CUDA_CHECK(cudaStreamEndCapture(g_stream, &graph));
               CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
               CUDA_CHECK(cudaGraphLaunch(exec, g_stream));
               CUDA_CHECK(cudaGraphLaunch(exec, g_stream));
               CUDA_CHECK(cudaStreamSynchronize(g_stream));
               CUDA_CHECK(cudaGraphExecDestroy(exec));
               CUDA_CHECK(cudaGraphDestroy(graph));
             });
  }
}

// ============================================================================ benchmark

constexpr double kPeakBW = 4.30e12;    // measured D2D copy, bytes/s (read + write)
constexpr double kPeakFlops = 790e12;  // measured bf16 dense GEMM

struct BenchRow {
  std::string shape;
  int M;
  std::string kernel;
  double us, gbs, tflops, floor_us;
};
std::vector<BenchRow> g_rows;

/// Median per-launch time (µs) of `launch(stream, rep)` captured R times into a graph, replayed.
double time_graph(const std::function<void(cudaStream_t, int)>& launch, int R, int replays = 11) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
  try {
    for (int i = 0; i < R; ++i) launch(g_stream, i);
  } catch (...) {
    cudaStreamEndCapture(g_stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(g_stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 2; ++i) CUDA_CHECK(cudaGraphLaunch(exec, g_stream));
  std::vector<float> t;
  for (int i = 0; i < replays; ++i) {
    CUDA_CHECK(cudaEventRecord(e0, g_stream));
    CUDA_CHECK(cudaGraphLaunch(exec, g_stream));
    CUDA_CHECK(cudaEventRecord(e1, g_stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(t.begin(), t.end());
  return 1000.0 * t[t.size() / 2] / R;
}

// Bandwidth probes: a grid-stride copy and a read-only stream (the weight loads' instruction:
// ld.global.nc.L1::no_allocate, 4 × 16 bytes in flight per thread per iteration), and an SM clock
// probe (clock64 over a timed spin).
__global__ void bw_copy_kernel(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 v0 = frag::ld_weight_nc(a + i), v1 = frag::ld_weight_nc(a + i + stride);
    const uint4 v2 = frag::ld_weight_nc(a + i + 2 * stride),
                v3 = frag::ld_weight_nc(a + i + 3 * stride);
    __stcs(b + i, v0);
    __stcs(b + i + stride, v1);
    __stcs(b + i + 2 * stride, v2);
    __stcs(b + i + 3 * stride, v3);
  }
  for (; i < n; i += stride) __stcs(b + i, frag::ld_weight_nc(a + i));
}
__global__ void bw_read_kernel(const uint4* __restrict__ a, size_t n, uint32_t* sink) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 v0 = frag::ld_weight_nc(a + i), v1 = frag::ld_weight_nc(a + i + stride);
    const uint4 v2 = frag::ld_weight_nc(a + i + 2 * stride),
                v3 = frag::ld_weight_nc(a + i + 3 * stride);
    acc ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
    acc ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n; i += stride) {
    const uint4 v = frag::ld_weight_nc(a + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;  // keeps the loads; practically never taken
}
__global__ void clock_probe_kernel(long long cycles, long long* out) {
  const long long t0 = clock64();
  long long t = t0;
  while (t - t0 < cycles) t = clock64();
  if (threadIdx.x == 0) out[0] = t - t0;
}

/// SM clock (MHz) right now: a 20M-cycle spin timed with events.
double probe_sm_mhz() {
  DevBuf out(8);
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventRecord(e0, g_stream));
  clock_probe_kernel<<<1, 32, 0, g_stream>>>(20000000LL, static_cast<long long*>(out.p));
  CUDA_CHECK(cudaEventRecord(e1, g_stream));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  long long cyc = 0;
  CUDA_CHECK(cudaMemcpy(&cyc, out.p, 8, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  return cyc / (ms * 1e3);
}

/// Memory ceilings, after a ~0.3 s warm-up (the GPU idles at a low clock): cudaMemcpy D2D, the
/// copy kernel (both read + write bytes) and the read-only kernel, 1 GiB buffers, graphs of 5
/// launches, median of 7 replays; prints all three and the SM clock. Returns the read-only rate.
double bench_copy_bw() {
  const size_t bytes = (size_t)1 << 30, n = bytes / 16;
  DevBuf a(bytes), b(bytes), sink(64);
  CUDA_CHECK(cudaMemset(a.p, 1, bytes));
  CUDA_CHECK(cudaMemset(b.p, 0, bytes));
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const dim3 grid((unsigned)(sms * 4)), block(512);
  auto* src = static_cast<const uint4*>(a.p);
  auto* dst = static_cast<uint4*>(b.p);
  const auto t_w0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t_w0).count() < 0.3) {
    for (int i = 0; i < 20; ++i) bw_copy_kernel<<<grid, block, 0, g_stream>>>(src, dst, n);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
  }
  const double mhz = probe_sm_mhz();
  const double us_memcpy = time_graph(
      [&](cudaStream_t st, int) {
        CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, st));
      },
      5, 7);
  const double us_copy = time_graph(
      [&](cudaStream_t st, int) { bw_copy_kernel<<<grid, block, 0, st>>>(src, dst, n); }, 5, 7);
  const double us_read = time_graph(
      [&](cudaStream_t st, int) {
        bw_read_kernel<<<grid, block, 0, st>>>(src, n, static_cast<uint32_t*>(sink.p));
      },
      5, 7);
  const double memcpy_bw = 2.0 * bytes / (us_memcpy * 1e-6),
               copy_bw = 2.0 * bytes / (us_copy * 1e-6);
  const double read_bw = bytes / (us_read * 1e-6);
  std::printf(
      "bench device-to-device copy: cudaMemcpy %.0f GB/s, copy kernel %.0f GB/s (read + write), "
      "read-only kernel %.0f GB/s; SM clock after warm-up %.0f MHz; ceiling used: 4300 GB/s\n",
      memcpy_bw / 1e9, copy_bw / 1e9, read_bw / 1e9, mhz);
  return read_bw;
}

/// Rotating copies of one packed weight in one allocation (views into it).
struct W4Copies {
  DevBuf mem;
  std::vector<W4View> views;
  size_t bytes_each = 0;
};

W4Copies replicate(const W4Weight& w, size_t min_total) {
  W4Copies c;
  const W4View& v = w.view();
  const size_t q = v.d.q_bytes(), sz = v.d.sz_bytes();
  const size_t stride = ceil_div<size_t>(q, 256) * 256 + ceil_div<size_t>(sz, 256) * 256;
  const int n = (int)std::max<size_t>(4, ceil_div<size_t>(min_total, stride));
  c.mem = DevBuf(stride * n);
  c.bytes_each = w.bytes();
  for (int i = 0; i < n; ++i) {
    char* base = static_cast<char*>(c.mem.p) + stride * i;
    char* szp = base + ceil_div<size_t>(q, 256) * 256;
    CUDA_CHECK(cudaMemcpy(base, v.q, q, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(szp, v.sz, sz, cudaMemcpyDeviceToDevice));
    W4View c_v = v;
    c_v.q = reinterpret_cast<const uint4*>(base);
    c_v.sz = reinterpret_cast<const uint2*>(szp);
    c.views.push_back(c_v);
  }
  return c;
}

struct W8Copies {
  DevBuf mem;
  std::vector<W8View> views;
};

W8Copies replicate8(const W8Weight& w, size_t min_total) {
  W8Copies c;
  const W8View& v = w.view();
  const size_t q = v.d.q_bytes(), sb = v.d.s_bytes();
  const size_t stride = ceil_div<size_t>(q, 256) * 256 + ceil_div<size_t>(sb, 256) * 256;
  const int n = (int)std::max<size_t>(4, ceil_div<size_t>(min_total, stride));
  c.mem = DevBuf(stride * n);
  for (int i = 0; i < n; ++i) {
    char* base = static_cast<char*>(c.mem.p) + stride * i;
    char* sp = base + ceil_div<size_t>(q, 256) * 256;
    CUDA_CHECK(cudaMemcpy(base, v.q, q, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(sp, v.s, sb, cudaMemcpyDeviceToDevice));
    W8View c_v = v;
    c_v.q = reinterpret_cast<const uint4*>(base);
    c_v.s = reinterpret_cast<const uint32_t*>(sp);
    c.views.push_back(c_v);
  }
  return c;
}

void add_row(const std::string& shape, int M, const std::string& kernel, double us, size_t wbytes,
             int64_t N, int64_t K);

/// Times one configuration and records it; a failure prints an ERROR row and the bench goes on
/// (unless the device is left in a sticky error state).
double bench_one(const std::string& shape, int M, const std::string& kernel, size_t wbytes,
                 int64_t N, int64_t K, const std::function<void(cudaStream_t, int)>& launch,
                 int R) {
  try {
    const double us = time_graph(launch, R);
    add_row(shape, M, kernel, us, wbytes, N, K);
    return us;
  } catch (const std::exception& e) {
    std::printf("bench %-14s M=%4d %-26s ERROR %s\n", shape.c_str(), M, kernel.c_str(), e.what());
    (void)cudaGetLastError();
    const cudaError_t st = cudaDeviceSynchronize();
    if (st != cudaSuccess) throw Error(std::string("sticky CUDA error: ") + cudaGetErrorString(st));
  }
  return -1;
}

void add_row(const std::string& shape, int M, const std::string& kernel, double us, size_t wbytes,
             int64_t N, int64_t K) {
  const double flops = 2.0 * M * N * K;
  BenchRow row{shape,
               M,
               kernel,
               us,
               wbytes / (us * 1e-6) / 1e9,
               flops / (us * 1e-6) / 1e12,
               std::max(wbytes / kPeakBW, flops / kPeakFlops) * 1e6};
  std::printf(
      "bench %-14s M=%4d %-26s %9.2f us  %7.0f GB/s (%5.1f%% of 4.3 TB/s)  %6.1f TFLOP/s "
      "(%5.1f%%)  floor %8.2f us\n",
      shape.c_str(), M, kernel.c_str(), us, row.gbs, 100 * row.gbs * 1e9 / kPeakBW, row.tflops,
      100 * row.tflops * 1e12 / kPeakFlops, row.floor_us);
  std::fflush(stdout);
  g_rows.push_back(row);
}

struct BS {
  const char* name;
  int64_t N, K;
};
const BS kBenchShapes[] = {{"7B qkv", 12288, 4096},
                           {"7B o", 4096, 4096},
                           {"7B gate_up", 22016, 4096},
                           {"7B down", 4096, 11008},
                           {"Tiny qkv", 2560, 2048},
                           {"Tiny o", 2048, 2048},
                           {"Tiny gate_up", 11264, 2048},
                           {"Tiny down", 2048, 5632},
                           // 7B gate|up's K with whole rounds of w4_gemv3's one-wave grid on an
                           // H200 (132 SMs x 2 CTAs x 16 rows: 5 and 6 rounds; 7B gate_up is
                           // 5.21): what the last, partial round costs (linear notes §19)
                           {"7B gu 5r", 21120, 4096},
                           {"7B gu 6r", 25344, 4096}};
double g_read_bw = 0;

/// The w4_gemv2 configurations the bench times (label, config); "def" = w4_gemv2_default_config.
struct V2Bench {
  const char* label;
  W4Gemv2Config cfg;
};
std::vector<V2Bench> v2_bench_configs() {
  auto mk = [](int w, int r, bool sub, bool pdl) {
    W4Gemv2Config c;
    c.warps = w;
    c.rows_per_cta = r;
    c.f16_subnormal = sub;
    c.pdl = pdl;
    return c;
  };
  return {{"w4_gemv2/def", mk(0, 0, false, false)},
          {"w4_gemv2/def/sub", mk(0, 0, true, false)},
          {"w4_gemv2/def/pdl", mk(0, 0, false, true)},
          {"w4_gemv2/4w/r1", mk(4, 1, false, false)},
          {"w4_gemv2/8w/r1", mk(8, 1, false, false)},
          {"w4_gemv2/4w/r2", mk(4, 2, false, false)},
          {"w4_gemv2/8w/r2", mk(8, 2, false, false)},
          {"w4_gemv2/4w/persist", mk(4, -1, false, false)},
          {"w4_gemv2/8w/persist", mk(8, -1, false, false)}};
}

/// The w4_gemv3 configurations the bench times.
struct V3Bench {
  const char* label;
  W4Gemv3Config cfg;
};
std::vector<V3Bench> v3_bench_configs() {
  auto mk = [](int split, bool probe) {
    W4Gemv3Config c;
    c.split = split;
    c.probe = probe;
    return c;
  };
  return {{"w4_gemv3/auto", mk(0, false)},   {"w4_gemv3/s1", mk(1, false)},
          {"w4_gemv3/s2", mk(2, false)},     {"w4_gemv3/s4", mk(4, false)},
          {"w4_gemv3/s8", mk(8, false)},     {"w4_gemv3/probe-s8", mk(8, true)},
          {"w4_gemv3/probe-s4", mk(4, true)}};
}

/// --bench-one SHAPE M KERNEL [ITERS]: one configuration launched ITERS times (default 60)
/// without graphs over rotating weight copies (for ncu: --launch-skip / --launch-count).
/// SHAPE: a bench shape with '_' for ' ' (7B_gate_up); KERNEL: gemv (w4_gemv, 8 warps, auto x
/// staging), gemv:W (W warps), gemv2 (default config) or a v2 label without the "w4_gemv2/"
/// prefix (def/sub, 4w/r1, 8w/persist, ...), gemv3 (default split) or gemv3:S (split S); a
/// suffix "probe" (gemv3:8probe) times the loads alone.
int bench_one_main(const std::string& shape, int M, const std::string& kernel, int iters) {
  const BS* bs = nullptr;
  for (const BS& b : kBenchShapes) {
    std::string n = b.name;
    std::replace(n.begin(), n.end(), ' ', '_');
    if (n == shape) bs = &b;
  }
  if (bs == nullptr) throw Error("--bench-one: unknown shape " + shape);
  Rng r(5);
  Int4Matrix m = random_int4(bs->N, bs->K, 128, r, false);
  const W4Weight w = W4Weight::from_parts({&m});
  W4Copies wc = replicate(w, (size_t)256 << 20);
  const int nv = (int)wc.views.size();
  HostX hx = make_x(DType::F16, M, bs->K, bs->K, r);
  DevX dx(hx);
  DevBuf y((size_t)M * bs->N * 2);
  std::function<void(int)> launch;
  if (kernel.rfind("gemv2", 0) == 0 || kernel.rfind("def", 0) == 0 ||
      kernel.find("w/") != std::string::npos) {
    W4Gemv2Config cfg;
    const std::string lab = kernel == "gemv2" ? "def" : kernel;
    bool found = false;
    for (const V2Bench& vb : v2_bench_configs())
      if (std::string(vb.label) == "w4_gemv2/" + lab) {
        cfg = vb.cfg;
        found = true;
      }
    if (!found) throw Error("--bench-one: unknown v2 configuration " + kernel);
    launch = [&, cfg](int i) {
      w4_gemv2(wc.views[(size_t)(i % nv)], dx.buf.p, DType::F16, M, bs->K, y.p, DType::F16, bs->N,
               nullptr, g_stream, cfg);
    };
  } else if (kernel.rfind("gemv3", 0) == 0) {
    W4Gemv3Config c3;
    c3.split = kernel.size() > 6 ? std::atoi(kernel.c_str() + 6) : 0;
    c3.probe = kernel.find("probe") != std::string::npos;
    launch = [&, c3](int i) {
      w4_gemv3(wc.views[(size_t)(i % nv)], dx.buf.p, DType::F16, M, bs->K, y.p, DType::F16, bs->N,
               nullptr, g_stream, c3);
    };
  } else if (kernel.rfind("gemv", 0) == 0) {
    const int warps = kernel.size() > 5 ? std::atoi(kernel.c_str() + 5) : 8;
    launch = [&, warps](int i) {
      w4_gemv(wc.views[(size_t)(i % nv)], dx.buf.p, DType::F16, M, bs->K, y.p, DType::F16, bs->N,
              nullptr, g_stream, warps, -1);
    };
  } else {
    throw Error("--bench-one: unknown kernel " + kernel);
  }
  for (int i = 0; i < 5; ++i) launch(i);
  CUDA_CHECK(cudaStreamSynchronize(g_stream));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventRecord(e0, g_stream));
  for (int i = 0; i < iters; ++i) launch(i);
  CUDA_CHECK(cudaEventRecord(e1, g_stream));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  std::printf(
      "bench-one %s M=%d %s: %d launches (+5 warm-up), %.2f us per launch (stream, no graph)\n",
      shape.c_str(), M, kernel.c_str(), iters, 1000.0 * ms / iters);
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  return 0;
}

void bench() {
  std::printf(
      "\n== benchmark (CUDA graphs of R launches over rotating weight copies >= 256 MB; "
      "median of 11 replays)\n");
  g_read_bw = bench_copy_bw();
  std::vector<int> Ms = {1, 4, 8, 16, 64, 512};
  if (g_opt.bench_v3) Ms = {1, 4, 8};
  Rng r(5);
  for (const BS& s : kBenchShapes) {
    Int4Matrix m = random_int4(s.N, s.K, 128, r, false);
    const W4Weight w = W4Weight::from_parts({&m});
    const size_t min_total = (size_t)256 << 20;
    W4Copies wc = replicate(w, min_total);
    const int R = std::max(20, (int)wc.views.size());
    const int nv = (int)wc.views.size();
    HostX hx = make_x(DType::F16, 512, s.K, s.K, r);
    DevX dx(hx);
    DevBuf y((size_t)512 * s.N * 2);
    size_t ws_bytes = linear_workspace_bytes(w, 512, true);
    for (int M : Ms)
      for (W4GemmTile t : {W4GemmTile::S32, W4GemmTile::S64, W4GemmTile::L128, W4GemmTile::L128R})
        ws_bytes = std::max(ws_bytes,
                            w4_gemm_workspace_bytes(w.view(), M, w4_gemm_split_k(w.view(), t, M)));
    DevBuf ws(ws_bytes);
    DevBuf dense((size_t)s.N * s.K * 2);
    const size_t wb = w.bytes();
    for (int M : Ms) {
      if (M <= 8 && !g_opt.bench_v3) {
        for (int warps : {4, 8, 16})
          for (int x_smem : {1, 0}) {
            if (warps == 4 && x_smem == 0) continue;
            bench_one(
                s.name, M,
                "w4_gemv/" + std::to_string(warps) + "w/" + (x_smem ? "xs-if-fits" : "regs"), wb,
                s.N, s.K,
                [&](cudaStream_t st, int i) {
                  w4_gemv(wc.views[(size_t)(i % nv)], dx.buf.p, DType::F16, M, s.K, y.p, DType::F16,
                          s.N, nullptr, st, warps, x_smem);
                },
                R);
          }
      }
      if (M <= 8)
        for (const V3Bench& vb : v3_bench_configs()) {
          const W4Gemv3Config c3 = vb.cfg;
          bench_one(
              s.name, M, vb.label, wb, s.N, s.K,
              [&, c3](cudaStream_t st, int i) {
                w4_gemv3(wc.views[(size_t)(i % nv)], dx.buf.p, DType::F16, M, s.K, y.p, DType::F16,
                         s.N, nullptr, st, c3);
              },
              R);
        }
      if (M <= 16 && w4_gemv2_fits(w.view(), M, 8) && !g_opt.bench_v3)
        for (const V2Bench& vb : v2_bench_configs())
          bench_one(
              s.name, M, vb.label, wb, s.N, s.K,
              [&](cudaStream_t st, int i) {
                w4_gemv2(wc.views[(size_t)(i % nv)], dx.buf.p, DType::F16, M, s.K, y.p, DType::F16,
                         s.N, nullptr, st, vb.cfg);
              },
              R);
      if (M > 8) {
        for (W4GemmTile t :
             {W4GemmTile::S32, W4GemmTile::S64, W4GemmTile::L128, W4GemmTile::L128R}) {
          const int sk = w4_gemm_split_k(w.view(), t, M);
          bench_one(
              s.name, M, std::string(w4_gemm_tile_name(t)) + "/s" + std::to_string(sk), wb, s.N,
              s.K,
              [&](cudaStream_t st, int i) {
                w4_gemm(wc.views[(size_t)(i % nv)], t, sk, dx.buf.p, DType::F16, M, s.K, y.p,
                        DType::F16, s.N, nullptr, ws.p, ws.n, st);
              },
              R);
        }
        const double t_dq = bench_one(
            s.name, M, "dequant only (r+w)", wb + (size_t)s.N * s.K * 2, 0, 0,
            [&](cudaStream_t st, int i) {
              w4_dequantize(wc.views[(size_t)(i % nv)], dense.p, DType::F16, s.K, st);
            },
            R);
        const double t_cb = bench_one(
            s.name, M, "cublas only (fp16 W)", (size_t)s.N * s.K * 2, s.N, s.K,
            [&](cudaStream_t st, int) {
              cublas_dense(nullptr, dense.p, s.N, s.K, dx.buf.p, DType::F16, M, s.K, y.p,
                           DType::F16, s.N, nullptr, st);
            },
            20);
        if (t_dq > 0 && t_cb > 0)
          add_row(s.name, M, "dequant+cublas (sum)", t_dq + t_cb, wb, s.N, s.K);
      }
      const LinearPlan plan = w4a16_plan(w.view(), M, true);
      bench_one(
          s.name, M, std::string("AUTO ") + linear_kernel_name(plan.kernel), wb, s.N, s.K,
          [&](cudaStream_t st, int i) {
            linear_w4a16(wc.views[(size_t)(i % nv)], dx.buf.p, DType::F16, M, s.K, y.p, DType::F16,
                         s.N, nullptr, Workspace{ws.p, ws.n}, st, &g_dense);
          },
          R);
    }
    // Q8_0 GEMV at decode sizes.
    if (!g_opt.bench_v3) {
      Int8Matrix m8 = random_int8(s.N, s.K, 32, r);
      const W8Weight w8 = W8Weight::from_parts({&m8});
      W8Copies c8 = replicate8(w8, min_total);
      const int nv8 = (int)c8.views.size();
      for (int M : {1, 8})
        for (int x_smem : {-1, 1, 0})
          bench_one(
              s.name, M,
              std::string("w8_gemv/8w/") + (x_smem < 0 ? "auto"
                                            : x_smem   ? "xs-if-fits"
                                                       : "regs"),
              w8.bytes(), s.N, s.K,
              [&](cudaStream_t st, int i) {
                w8_gemv(c8.views[(size_t)(i % nv8)], dx.buf.p, DType::F16, M, s.K, y.p, DType::F16,
                        s.N, nullptr, st, 8, x_smem);
              },
              std::max(20, nv8));
    }
  }
  // Short summary (the lead sees the last lines): the dispatcher's choice per shape and M, and the
  // fastest full-problem alternative measured (the "only" rows are parts, not candidates).
  std::printf(
      "\n== summary: AUTO = the dispatcher; us per call; GB/s of weight bytes (%% of 4.3 TB/s); "
      "TFLOP/s (%% of 790); floor = max(bytes/4.3 TB/s, flops/790 TFLOP/s)\n");
  std::printf("%-12s %4s %-14s %8s %6s %5s %6s %5s %8s | %-20s %8s | %-20s %8s %5s\n", "shape", "M",
              "auto kernel", "us", "GB/s", "%BW", "TF/s", "%pk", "floor", "best measured", "us",
              "best w4_gemv2", "us", "%BW");
  for (const BenchRow& b : g_rows) {
    if (b.kernel.rfind("AUTO", 0) != 0) continue;
    const BenchRow* best = nullptr;
    for (const BenchRow& c : g_rows)
      if (c.shape == b.shape && c.M == b.M && c.kernel.find("only") == std::string::npos &&
          c.kernel.rfind("AUTO", 0) != 0 && c.kernel.rfind("w8", 0) != 0 &&
          (best == nullptr || c.us < best->us))
        best = &c;
    const BenchRow* best2 = nullptr;
    for (const BenchRow& c : g_rows)
      if (c.shape == b.shape && c.M == b.M && c.kernel.rfind("w4_gemv2", 0) == 0 &&
          (best2 == nullptr || c.us < best2->us))
        best2 = &c;
    std::printf(
        "%-12s %4d %-14s %8.2f %6.0f %5.1f %6.1f %5.1f %8.2f | %-20s %8.2f | %-20s %8.2f %5.1f\n",
        b.shape.c_str(), b.M, b.kernel.c_str() + 5, b.us, b.gbs, 100 * b.gbs * 1e9 / kPeakBW,
        b.tflops, 100 * b.tflops * 1e12 / kPeakFlops, b.floor_us,
        best ? best->kernel.c_str() + (best->kernel.rfind("w4_", 0) == 0 ? 3 : 0) : "-",
        best ? best->us : 0.0, best2 ? best2->kernel.c_str() + 9 : "-", best2 ? best2->us : 0.0,
        best2 ? 100 * best2->gbs * 1e9 / kPeakBW : 0.0);
  }
  // w4_gemv2 configurations side by side (us), M <= 16, and the old kernel's best.
  std::printf(
      "\n== w4_gemv2 configurations (us per call; read-only ceiling %.0f GB/s)\n%-12s %3s %8s",
      g_read_bw / 1e9, "shape", "M", "gemv-best");
  for (const V2Bench& vb : v2_bench_configs()) std::printf(" %11s", vb.label + 9);
  std::printf("\n");
  for (const BS& bs : kBenchShapes)
    for (int M : {1, 4, 8, 16}) {
      double old_best = 0;
      for (const BenchRow& c : g_rows)
        if (c.shape == bs.name && c.M == M &&
            (c.kernel.rfind("w4_gemv/", 0) == 0 || c.kernel.rfind("gemm_", 0) == 0) &&
            c.kernel.find("only") == std::string::npos && (old_best == 0 || c.us < old_best))
          old_best = c.us;
      std::printf("%-12s %3d %8.2f", bs.name, M, old_best);
      for (const V2Bench& vb : v2_bench_configs()) {
        double t = 0;
        for (const BenchRow& c : g_rows)
          if (c.shape == bs.name && c.M == M && c.kernel == vb.label) t = c.us;
        std::printf(" %11.2f", t);
      }
      std::printf("\n");
    }
  // w4_gemv3 splits next to the best v1 and v2 times (us), M <= 8.
  std::vector<const char*> v3_labels;
  for (const V3Bench& vb : v3_bench_configs()) v3_labels.push_back(vb.label);
  std::printf(
      "\n== w4_gemv3 (us per call; %% of the read-only ceiling for the best non-probe v3)\n"
      "%-12s %3s %8s %8s",
      "shape", "M", "v1-best", "v2-best");
  for (const char* l : v3_labels) std::printf(" %9s", l + 9);
  std::printf(" %6s\n", "%read");
  for (const BS& bs : kBenchShapes)
    for (int M : {1, 4, 8}) {
      double b1 = 0, b2 = 0, b3 = 0, gb3 = 0;
      for (const BenchRow& c : g_rows) {
        if (c.shape != bs.name || c.M != M) continue;
        if (c.kernel.rfind("w4_gemv/", 0) == 0 && (b1 == 0 || c.us < b1)) b1 = c.us;
        if (c.kernel.rfind("w4_gemv2/", 0) == 0 && (b2 == 0 || c.us < b2)) b2 = c.us;
      }
      // (--bench-v3 times neither v1 nor v2: "-")
      auto cell = [](double t) {
        char c[16];
        if (t > 0)
          std::snprintf(c, sizeof c, "%8.2f", t);
        else
          std::snprintf(c, sizeof c, "%8s", "-");
        return std::string(c);
      };
      std::printf("%-12s %3d %s %s", bs.name, M, cell(b1).c_str(), cell(b2).c_str());
      for (const char* l : v3_labels) {
        double t = 0;
        for (const BenchRow& c : g_rows)
          if (c.shape == bs.name && c.M == M && c.kernel == l) {
            t = c.us;
            // The probe rows skip the math: not candidates for the kernel's best.
            const bool probe = std::string(l).find("probe") != std::string::npos;
            if (!probe && (b3 == 0 || t < b3)) b3 = t, gb3 = c.gbs;
          }
        std::printf(" %9.2f", t);
      }
      std::printf(" %6.1f\n", g_read_bw > 0 ? 100 * gb3 * 1e9 / g_read_bw : 0.0);
    }
  for (const BenchRow& b : g_rows)
    if (b.kernel.rfind("w8", 0) == 0 && b.kernel.find("auto") != std::string::npos)
      std::printf("%-12s %4d %-14s %8.2f %6.0f %5.1f %6.1f %5.1f %8.2f |\n", b.shape.c_str(), b.M,
                  b.kernel.c_str(), b.us, b.gbs, 100 * b.gbs * 1e9 / kPeakBW, b.tflops,
                  100 * b.tflops * 1e12 / kPeakFlops, b.floor_us);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--host-only")
      g_opt.host_only = true;
    else if (a == "--quick")
      g_opt.quick = true;
    else if (a == "--bench")
      g_opt.bench = true;
    else if (a == "--bench-only")
      g_opt.bench = g_opt.bench_only = true;
    else if (a == "--bench-v3")  // the w4_gemv3 configurations alone, M <= 8
      g_opt.bench = g_opt.bench_only = g_opt.bench_v3 = true;
    else if (a == "--only" && i + 1 < argc)
      g_opt.only = argv[++i];
    else if (a == "--bench-one" && i + 3 < argc) {
      g_opt.one_shape = argv[++i];
      g_opt.one_m = std::atoi(argv[++i]);
      g_opt.one_kernel = argv[++i];
      if (i + 1 < argc && argv[i + 1][0] != '-') g_opt.one_iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--host-only] [--quick] [--only gemv|gemm|dense|w8|auto|graph] "
                   "[--bench | --bench-only | --bench-v3] [--bench-one SHAPE M KERNEL [ITERS]]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    if (!g_opt.one_shape.empty()) {
      CUDA_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
      linear_kernels_init();
      const int rc =
          bench_one_main(g_opt.one_shape, g_opt.one_m, g_opt.one_kernel, g_opt.one_iters);
      CUDA_CHECK(cudaStreamDestroy(g_stream));
      return rc;
    }
    if (!g_opt.bench_only && g_opt.only.empty()) host_checks();
    if (g_opt.host_only) {
      std::printf("host checks: %d passed, %d failed\n", g_pass, g_fail);
      return g_fail ? 1 : 0;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.l2CacheSize >> 20);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    if (cublasCreate(&g_cublas) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
    g_cublas_ws = new DevBuf((size_t)64 << 20);  // so cuBLAS never allocates inside a capture
    if (cublasSetWorkspace(g_cublas, g_cublas_ws->p, g_cublas_ws->n) != CUBLAS_STATUS_SUCCESS)
      throw Error("cublasSetWorkspace failed");
    linear_kernels_init();
    std::printf("%s", linear_kernels_describe().c_str());
    if (!g_opt.bench_only) {
      if (family_on("gemv") || family_on("gemm") || family_on("dense") || family_on("auto"))
        gpu_w4_cases();
      if (family_on("w8")) gpu_w8_cases();
      if (family_on("graph")) gpu_graph_cases();
      std::printf("correctness: %d passed, %d failed\n", g_pass, g_fail);
    }
    if (g_opt.bench) bench();
    cublasDestroy(g_cublas);
    delete g_cublas_ws;
    CUDA_CHECK(cudaStreamDestroy(g_stream));
  } catch (const std::exception& e) {
    std::printf("FATAL: %s\ncorrectness so far: %d passed, %d failed\n", e.what(), g_pass, g_fail);
    return 1;
  }
  return g_fail ? 1 : 0;
}
