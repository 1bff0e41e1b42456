// The one dispatch ladder of the linear kernels (w4a16_plan / w8a16_plan), workspace sizing, the
// PERFX_CUDA_LINEAR_LOG trace, and linear_w4a16 / linear_w8a16.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear.cuh"
#include "backend/cuda/linear_internal.cuh"
#include "backend/cuda/norm_math.cuh"

namespace perfx::cuda {
namespace {

// "Use me?" predicates, in ladder order.
bool gemv_should_use(int M) {
  return M >= 1 && M <= 8;
}
bool gemm_s32_should_use(int M) {
  return M <= 32;
}
bool gemm_s64_should_use(int M) {
  return M <= 64;
}
bool dense_should_use(int M, bool have_dense) {
  return have_dense && M >= w4_dense_min_m();
}

bool env_flag(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
}

/// Prints the plan once per (kind, N, K, group, M, dtypes) when PERFX_CUDA_LINEAR_LOG is set.
void log_plan(const char* kind, int64_t N, int64_t K, int group, int M, DType xt, DType yt,
              const LinearPlan& p) {
  static const bool on = env_flag("PERFX_CUDA_LINEAR_LOG");
  if (!on) return;
  using Key = std::tuple<std::string, int64_t, int64_t, int, int, int, int>;
  static std::mutex mu;
  static std::set<Key> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(Key(kind, N, K, group, M, (int)xt, (int)yt)).second) return;
  }
  std::fprintf(stderr,
               "perfx cuda linear: %s N=%lld K=%lld group=%d M=%d x=%s y=%s -> %s (split_k %d)\n",
               kind, (long long)N, (long long)K, group, M, dtype_name(xt), dtype_name(yt),
               linear_kernel_name(p.kernel), p.split_k);
}

/// PERFX_CUDA_W4_GEMV (read once): unset (-2) = w4_gemv3 for M <= 8 where it applies, else the
/// measured v1/v2 rule (gemv_rule); "old" (-1) = that rule alone (before v3); "v1" or anything
/// else (0) = w4_gemv with its own defaults, "v2" (1) = v2 (fp16 magic) wherever it fits, "v2s"
/// (2) = v2 (fp16 subnormal), "v3" (3) = v3 wherever it applies (else v1).
int gemv_env_mode() {
  static const int v = [] {
    const char* e = std::getenv("PERFX_CUDA_W4_GEMV");
    if (e == nullptr) return -2;
    if (std::strcmp(e, "old") == 0) return -1;
    if (std::strcmp(e, "v2") == 0) return 1;
    if (std::strcmp(e, "v2s") == 0) return 2;
    if (std::strcmp(e, "v3") == 0) return 3;
    return 0;
  }();
  return v;
}
/// The v2 switches: -1 = rule (unset or "old"), 0 = off (v1, v3), 1 = magic, 2 = subnormal.
int gemv2_mode() {
  const int m = gemv_env_mode();
  return m < 0 ? -1 : m == 3 ? 0 : m;
}
/// v3 by default where the H200 bench measured it ahead of v1/v2 (docs/cuda_linear_notes.md §9):
/// matrices of >= 16M weights (M = 1: 7B qkv 11.3 vs 14.7 us, o 5.7 vs 6.5, gate_up 16.4 vs 22.9,
/// down 10.9 vs 13.3; TinyLlama gate_up 7.7 vs 8.6; M = 4 and 8 alike); the smaller TinyLlama
/// matrices stay on v1 (3.6 / 3.1 / 5.4 us against v3's 4.3 / 4.2 / 6.2: too few row blocks for
/// its 8-warp tasks). PERFX_CUDA_GEMV3_MIN_MW=N (millions of weights, read once) moves that
/// threshold (a measurement knob, docs/cuda_linear_notes.md §18).
bool gemv3_should_use(const W4View& w, int M) {
  // read (and a bad value refused) at the first W4 plan, whatever the matrix
  static const double min_weights = 1e6 * env_int("PERFX_CUDA_GEMV3_MIN_MW", 0, 1000000, 16);
  if (!w4_gemv3_supported(w, M)) return false;
  const int m = gemv_env_mode();
  return m == 3 || (m == -2 && (double)w.d.N * (double)w.d.K >= min_weights);
}

/// The decode-GEMV choice measured on an H200 (tools/device/cuda_check.sh,
/// docs/cuda_linear_notes.md "w4_gemv2 configurations", 2026-12-01): v2 with 8 warps and one
/// persistent wave wins on the wide K = 4096 matrices (7B fused QKV at M <= 4: 14.5 vs 16.3 us; 7B
/// gate|up at M <= 8: 22.8 vs 26.3 us); elsewhere w4_gemv with x in registers, 16 warps for N <=
/// 2048 (TinyLlama o / down: 3.06 / 5.41 us vs 3.84 / 6.52 with the defaults), else 8.
struct GemvRule {
  bool v2 = false;
  int warps = 0, x_smem = -1;
};
GemvRule gemv_rule(const W4View& w, int M) {
  GemvRule r;
  if (gemv2_mode() >= 0) return r;  // an explicit PERFX_CUDA_W4_GEMV
  const bool wide = w.d.K <= 4096 && (w.d.N >= 16384 || (w.d.N >= 8192 && M <= 4));
  if (M <= 8 && wide && w4_gemv2_fits(w, M, 8)) {
    r.v2 = true;
    return r;
  }
  r.warps = w.d.N <= 2048 ? 16 : 8;
  r.x_smem = 0;
  return r;
}

W4Gemv2Config gemv2_rule_config() {
  W4Gemv2Config c;
  c.warps = 8;
  c.rows_per_cta = -1;
  c.pdl = pdl_enabled();
  return c;
}

/// The v2 configuration from PERFX_CUDA_W4_GEMV_CFG ("warps,rows_per_cta"; zeros = the default
/// rule) and pdl_enabled().
W4Gemv2Config gemv2_env_config() {
  static const W4Gemv2Config c = [] {
    W4Gemv2Config r;
    const char* e = std::getenv("PERFX_CUDA_W4_GEMV_CFG");
    if (e != nullptr) {
      int wv = 0, rv = 0;
      if (std::sscanf(e, "%d,%d", &wv, &rv) >= 1) {
        if (wv == 4 || wv == 8) r.warps = wv;
        if (rv >= 1 || rv == -1) r.rows_per_cta = rv;
      }
    }
    r.f16_subnormal = gemv2_mode() == 2;
    return r;
  }();
  W4Gemv2Config r = c;
  r.pdl = pdl_enabled();
  return r;
}

bool gemv2_should_use(const W4View& w, int M) {
  if (gemv2_mode() < 0) return M >= 1 && gemv_rule(w, M).v2;
  return gemv2_mode() != 0 && M >= 1 && M <= 16 && w4_gemv2_fits(w, M, gemv2_env_config().warps);
}

size_t dense_bytes(int64_t N, int64_t K) {
  return (size_t)N * (size_t)K * 2;
}

}  // namespace

const char* linear_kernel_name(LinearKernel k) {
  switch (k) {
    case LinearKernel::Gemv:
      return "gemv";
    case LinearKernel::GemmS32:
      return "gemm_s32";
    case LinearKernel::GemmS64:
      return "gemm_s64";
    case LinearKernel::GemmL128:
      return "gemm_l128";
    case LinearKernel::Dense:
      return "dequant+dense";
    case LinearKernel::Gemv2:
      return "gemv2";
    case LinearKernel::Gemv3:
      return "gemv3";
  }
  return "?";
}

int w4_dense_min_m() {
  static const int v = env_int("PERFX_CUDA_W4_DENSE_MIN_M", 1, 1 << 20, 65);
  return v;
}

int qkv_trigger_pct() {
  static const int v = env_int("PERFX_CUDA_QKV_TRIGGER", 0, 99, 67);
  return v;
}

int qkv_grid_free() {
  static const int v = env_int("PERFX_CUDA_QKV_GRID_FREE", 0, 1024, 0);
  return v;
}

LinearPlan w4a16_plan(const W4View& w, int M, bool have_dense) {
  LinearPlan p;
  if (gemv3_should_use(w, M)) {
    p.kernel = LinearKernel::Gemv3;
  } else if (gemv2_should_use(w, M)) {
    p.kernel = LinearKernel::Gemv2;
  } else if (gemv_should_use(M)) {
    p.kernel = LinearKernel::Gemv;
  } else if (gemm_s32_should_use(M)) {
    p.kernel = LinearKernel::GemmS32;
    p.split_k = w4_gemm_split_k(w, W4GemmTile::S32, M);
  } else if (gemm_s64_should_use(M)) {
    p.kernel = LinearKernel::GemmS64;
    p.split_k = w4_gemm_split_k(w, W4GemmTile::S64, M);
  } else if (dense_should_use(M, have_dense)) {
    p.kernel = LinearKernel::Dense;
  } else {
    p.kernel = LinearKernel::GemmL128;
    p.split_k = w4_gemm_split_k(w, W4GemmTile::L128, M);
  }
  return p;
}

LinearPlan w8a16_plan(const W8View& w, int M, bool have_dense) {
  (void)w;
  LinearPlan p;
  p.kernel = (gemv_should_use(M) || !have_dense) ? LinearKernel::Gemv : LinearKernel::Dense;
  return p;
}

size_t linear_workspace_bytes(const W4View& v, int max_M, bool have_dense) {
  size_t b = 0;
  if (w4a8_should_use(v, std::min(max_M, 8)))
    b = act_q8_bytes(std::min(max_M, 8), v.d.K, v.d.group_size);
  for (int M = 9; M <= std::min(max_M, 64); ++M) {
    const LinearPlan p = w4a16_plan(v, M, have_dense);
    b = std::max(b, w4_gemm_workspace_bytes(v, M, p.split_k));
  }
  if (have_dense && max_M >= w4_dense_min_m()) b = std::max(b, dense_bytes(v.d.N, v.d.K));
  return b;
}

size_t linear_workspace_bytes(const W8View& w, int max_M, bool have_dense) {
  if (have_dense && max_M > 8) return dense_bytes(w.d.N, w.d.K);
  return 0;
}

namespace {
/// The decode configuration of w4_gemv3: PDL per PERFX_CUDA_PDL_GEMV3 (unset / "late": the next
/// kernel may launch after the main loop; "entry": at entry, 7B decode 13 % slower than late;
/// "0": no PDL for this kernel and no early trigger; a number 1..99: after that share (%) of each
/// warp's batches; docs/cuda_linear_notes.md §10). Read once per process.
W4Gemv3Config gemv3_config() {
  static const int v3_pdl = [] {  // 0 off, -1 entry, else the trigger share in % (100: late)
    const char* e = std::getenv("PERFX_CUDA_PDL_GEMV3");
    const std::string v = e != nullptr ? e : "";
    if (v.empty() || v == "late") return 100;
    if (v == "0") return 0;
    if (v == "entry") return -1;
    const int pct = std::atoi(v.c_str());
    PERFX_CHECK(
        v.find_first_not_of("0123456789") == std::string::npos && pct >= 1 && pct <= 99,
        "PERFX_CUDA_PDL_GEMV3 must be late, entry, 0 or a share 1..99 (%), got '" + v + "'");
    return pct;
  }();
  // PERFX_CUDA_L2_EVICT_FIRST=0|1 (default 1): the L2 policy of w4_gemv3's weight and record
  // loads, evict-first or evict-normal (the evict-normal arm lost 2.7 % on 7B decode and 5.3 % on
  // GGUF Q4_0 on an H100; docs/cuda_linear_notes.md §31).
  static const bool evict_first = env_int("PERFX_CUDA_L2_EVICT_FIRST", 0, 1, 1) != 0;
  W4Gemv3Config c;
  c.l2_evict_first = evict_first;
  c.pdl = pdl_enabled() && v3_pdl != 0;
  c.late_trigger = v3_pdl != -1;  // "0": no early trigger either (the implicit one at exit)
  c.trigger_pct = v3_pdl > 0 ? v3_pdl : 100;
  return c;
}
}  // namespace

namespace {
/// PERFX_CUDA_W4A8 (read once): unset / "0" off, "1" on, "skipq" on without launching the
/// activation quantizer (timing only: the GEMV reads whatever the workspace holds); anything else
/// is refused.
int w4a8_mode() {
  static const int m = [] {
    const char* e = std::getenv("PERFX_CUDA_W4A8");
    const std::string v = e != nullptr ? e : "";
    PERFX_CHECK(v.empty() || v == "0" || v == "1" || v == "skipq",
                "PERFX_CUDA_W4A8 must be 0, 1 or skipq, got '" + v + "'");
    return v == "1" ? 1 : v == "skipq" ? 2 : 0;
  }();
  return m;
}
}  // namespace

bool w4a8_should_use(const W4View& v, int M) {
  const bool on = w4a8_mode() != 0;
  const int g = v.d.group_size;
  return on && w4_gemv3_supported(v, M) && (g == 32 || g == 64 || g == 128) && v.d.K % 128 == 0;
}

namespace {
/// w4_gemv3 with int8 activations when w4a8_should_use (x quantized into ws first), else as is.
void gemv3_launch(const W4View& v, W4Gemv3Config c, const void* x, DType xt, int M, int64_t ldx,
                  void* y, DType yt, int64_t ldy, const float* bias, Workspace ws,
                  cudaStream_t stream) {
  if (w4a8_should_use(v, M) && ldx % 4 == 0 && ws.bytes >= act_q8_bytes(M, v.d.K, v.d.group_size))
    c.a8 = quantize_act_q8(x, xt, M, ldx, v.d.K, v.d.group_size, ws, stream, w4a8_mode() != 2);
  w4_gemv3(v, x, xt, M, ldx, y, yt, ldy, bias, stream, c);
}
}  // namespace

bool linear_w4a16_swiglu(const W4View& v, const void* x, DType xt, int M, int64_t ldx, void* act,
                         int64_t ldact, const float* bias, cudaStream_t stream,
                         const L2Prefetch& prefetch, Workspace ws) {
  // PERFX_CUDA_SWIGLU_EPILOGUE=0: never (the A/B of docs/cuda_linear_notes.md §10).
  static const bool on = !env_is("PERFX_CUDA_SWIGLU_EPILOGUE", "0");
  if (!on) return false;
  if (M == 0) return true;
  const LinearPlan p = w4a16_plan(v, M, false);
  if (p.kernel != LinearKernel::Gemv3) return false;
  log_plan(w4a8_should_use(v, M) ? "w4a8+swiglu" : "w4a16+swiglu", v.d.N, v.d.K, v.d.group_size, M,
           xt, xt, p);
  W4Gemv3Config c = gemv3_config();
  c.swiglu = true;
  c.prefetch = prefetch;
  gemv3_launch(v, c, x, xt, M, ldx, act, xt, ldact, bias, ws, stream);
  return true;
}

LinearPlan linear_w4a16(const W4View& v, const void* x, DType xt, int M, int64_t ldx, void* y,
                        DType yt, int64_t ldy, const float* bias, Workspace ws, cudaStream_t stream,
                        const DenseGemm* dense, const L2Prefetch& prefetch, int trigger_pct) {
  check_linear_args("linear_w4a16", v.d.N, v.d.K, x, xt, M, ldx, y, yt, ldy);
  if (M == 0) return LinearPlan{};
  const bool have_dense = dense != nullptr && dense->fn != nullptr;
  const LinearPlan p = w4a16_plan(v, M, have_dense);
  log_plan(p.kernel == LinearKernel::Gemv3 && w4a8_should_use(v, M) ? "w4a8" : "w4a16", v.d.N,
           v.d.K, v.d.group_size, M, xt, yt, p);
  switch (p.kernel) {
    case LinearKernel::Gemv: {
      const GemvRule r = gemv_rule(v, M);
      w4_gemv(v, x, xt, M, ldx, y, yt, ldy, bias, stream, r.warps, r.x_smem, prefetch);
      break;
    }
    case LinearKernel::Gemv2:
      w4_gemv2(v, x, xt, M, ldx, y, yt, ldy, bias, stream,
               gemv2_mode() < 0 ? gemv2_rule_config() : gemv2_env_config());
      break;
    case LinearKernel::Gemv3: {
      W4Gemv3Config c = gemv3_config();
      c.prefetch = prefetch;
      // only over the default rule (after the main loop): PERFX_CUDA_PDL_GEMV3 set otherwise wins
      if (trigger_pct > 0 && trigger_pct < 100 && c.pdl && c.late_trigger && c.trigger_pct == 100)
        c.trigger_pct = trigger_pct;
      if (trigger_pct > 0) c.grid_free = qkv_grid_free();  // the weight feeds attention
      gemv3_launch(v, c, x, xt, M, ldx, y, yt, ldy, bias, ws, stream);
      break;
    }
    case LinearKernel::GemmS32:
      w4_gemm(v, W4GemmTile::S32, p.split_k, x, xt, M, ldx, y, yt, ldy, bias, ws.ptr, ws.bytes,
              stream);
      break;
    case LinearKernel::GemmS64:
      w4_gemm(v, W4GemmTile::S64, p.split_k, x, xt, M, ldx, y, yt, ldy, bias, ws.ptr, ws.bytes,
              stream);
      break;
    case LinearKernel::GemmL128:
      w4_gemm(v, W4GemmTile::L128, p.split_k, x, xt, M, ldx, y, yt, ldy, bias, ws.ptr, ws.bytes,
              stream);
      break;
    case LinearKernel::Dense: {
      const size_t need = dense_bytes(v.d.N, v.d.K);
      PERFX_CHECK(ws.ptr != nullptr && ws.bytes >= need,
                  "linear_w4a16: dense path needs a workspace of " + std::to_string(need) +
                      " bytes, got " + std::to_string(ws.bytes));
      w4_dequantize(v, ws.ptr, xt, v.d.K, stream);
      dense->fn(dense->ctx, ws.ptr, v.d.N, v.d.K, x, xt, M, ldx, y, yt, ldy, bias, stream);
      break;
    }
  }
  return p;
}

bool w4a16_norm_pair_applies(const W4View& w1, const W4View& w2, int M) {
  const int64_t K = w2.d.K;
  if (M < 1 || M > 8 || w1.d.N != K || K % 8 != 0 || K > 4096) return false;
  if (w4a16_plan(w1, M, true).kernel != LinearKernel::Gemv ||
      w4a16_plan(w2, M, true).kernel != LinearKernel::Gemv)
    return false;
  const int warps = gemv_rule(w2, M).warps;
  return 32 * (warps == 0 ? 8 : warps) >= norm_vec_threads((int)(K / 8));
}

void linear_w4a16_norm_pair(const W4View& w1, const void* x, int64_t ldx, const float* b1,
                            void* residual, int64_t ldr, const float* gamma, float eps,
                            const W4View& w2, void* y2, int64_t ldy2, const float* b2, DType xt,
                            int M, cudaStream_t stream, const L2Prefetch& pf1,
                            const L2Prefetch& pf2) {
  PERFX_CHECK(w4a16_norm_pair_applies(w1, w2, M),
              "linear_w4a16_norm_pair: the pair [" + std::to_string(w1.d.N) + ", " +
                  std::to_string(w1.d.K) + "] -> [" + std::to_string(w2.d.N) + ", " +
                  std::to_string(w2.d.K) + "] at M = " + std::to_string(M) +
                  " does not take the fused norm (w4a16_norm_pair_applies)");
  // the consumer's needs first: a failure after the producer ran would leave y1 added twice on
  // retry
  check_linear_args("linear_w4a16_norm_pair (consumer)", w2.d.N, w2.d.K, residual, xt, M, ldr, y2,
                    xt, ldy2);
  PERFX_CHECK(gamma != nullptr && reinterpret_cast<uintptr_t>(gamma) % 16 == 0,
              "linear_w4a16_norm_pair: gamma must be non-null and 16-byte aligned");
  LinearPlan p;
  p.kernel = LinearKernel::Gemv;
  log_plan("w4a16+norm-link (producer)", w1.d.N, w1.d.K, w1.d.group_size, M, xt, xt, p);
  log_plan("w4a16+norm-link (consumer)", w2.d.N, w2.d.K, w2.d.group_size, M, xt, xt, p);
  GemvNormLink producer;
  producer.residual = residual;
  producer.ldr = ldr;
  const GemvRule r1 = gemv_rule(w1, M);
  // y is not written by the producer; the residual stands in for check_linear_args
  w4_gemv(w1, x, xt, M, ldx, residual, xt, ldr, b1, stream, r1.warps, r1.x_smem, pf1, producer);
  GemvNormLink consumer;
  consumer.gamma = gamma;
  consumer.eps = eps;
  const GemvRule r2 = gemv_rule(w2, M);
  w4_gemv(w2, residual, xt, M, ldr, y2, xt, ldy2, b2, stream, r2.warps, r2.x_smem, pf2, consumer);
}

LinearPlan linear_w8a16(const W8View& v, const void* x, DType xt, int M, int64_t ldx, void* y,
                        DType yt, int64_t ldy, const float* bias, Workspace ws, cudaStream_t stream,
                        const DenseGemm* dense) {
  check_linear_args("linear_w8a16", v.d.N, v.d.K, x, xt, M, ldx, y, yt, ldy);
  if (M == 0) return LinearPlan{};
  const bool have_dense = dense != nullptr && dense->fn != nullptr;
  const LinearPlan p = w8a16_plan(v, M, have_dense);
  log_plan("w8a16", v.d.N, v.d.K, v.d.group_size, M, xt, yt, p);
  if (p.kernel == LinearKernel::Dense) {
    const size_t need = dense_bytes(v.d.N, v.d.K);
    PERFX_CHECK(ws.ptr != nullptr && ws.bytes >= need,
                "linear_w8a16: dense path needs a workspace of " + std::to_string(need) +
                    " bytes, got " + std::to_string(ws.bytes));
    w8_dequantize(v, ws.ptr, xt, v.d.K, stream);
    dense->fn(dense->ctx, ws.ptr, v.d.N, v.d.K, x, xt, M, ldx, y, yt, ldy, bias, stream);
    return p;
  }
  // GEMV over slices of up to 8 tokens (one launch when M <= 8).
  const size_t ysize = yt == DType::F32 ? 4 : 2;
  for (int m0 = 0; m0 < M; m0 += 8) {
    const int mt = std::min(8, M - m0);
    w8_gemv(v, static_cast<const char*>(x) + (size_t)m0 * (size_t)ldx * 2, xt, mt, ldx,
            static_cast<char*>(y) + (size_t)m0 * (size_t)ldy * ysize, yt, ldy, bias, stream);
  }
  return p;
}

std::string describe_kernel(const char* name, const void* fn, int threads, size_t dyn_smem) {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, fn));
  int ctas = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, fn, threads, dyn_smem));
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%-34s regs %3d  smem %5zu+%6zu B  local %zu B  threads %3d  ctas/SM %d\n", name,
                a.numRegs, (size_t)a.sharedSizeBytes, dyn_smem, (size_t)a.localSizeBytes, threads,
                ctas);
  return buf;
}

void linear_kernels_init() {
  gemm_init_attributes();
  gemv_init_attributes();
  gemv2_init_attributes();
}

std::string linear_kernels_describe() {
  return describe_gemv_kernels() + describe_gemv2_kernels() + describe_gemv3_kernels() +
         describe_gemm_kernels();
}

}  // namespace perfx::cuda
