// Dense CPU linear through the backend (one thread): bf16 weights, the default model's shapes
// (hidden 256, intermediate 768) and Llama-2-7B's q_proj, at T = 1 (decode GEMV: a dot per row,
// converted on the fly) and T > 1 (the blocked GEMM of gemm.h). Counter: GFLOP/s (2·in·out·T).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"

namespace {

/// Times `linear` of one CPU thread on random weights [out, in] of `dt` (BF16 or F16) for T
/// tokens (the caller sets its counters).
void run_dense(benchmark::State& state, perfx::DType dt, const char* name, int64_t in, int64_t out,
               int T) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<uint16_t> w(static_cast<size_t>(in * out));
  for (auto& v : w)
    v = dt == perfx::DType::F16 ? perfx::fp32_to_fp16(nd(rng)) : perfx::fp32_to_bf16(nd(rng));
  perfx::LinearSource s;
  s.weight.name = name;
  s.weight.dtype = dt;
  s.weight.shape = {out, in};
  s.weight.data = w.data();
  s.weight.nbytes = w.size() * 2;
  s.out = out;
  s.in = in;
  auto be = perfx::cpu::create_cpu_backend(1);
  auto wt = be->load_linear({s});
  std::vector<float> x(static_cast<size_t>(T * in)), y(static_cast<size_t>(T * out));
  for (auto& v : x) v = nd(rng);
  perfx::Tensor xt{x.data(), perfx::DType::F32, T, in, in},
      yt{y.data(), perfx::DType::F32, T, out, out};
  for (auto _ : state) {
    be->linear(xt, *wt, nullptr, yt);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

void BM_DenseLinear(benchmark::State& state) {
  const int64_t in = state.range(0), out = state.range(1);
  const int T = static_cast<int>(state.range(2));
  run_dense(state, perfx::DType::BF16, "w", in, out, T);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * in * out * T * static_cast<double>(state.iterations()) * 1e-9,
                         benchmark::Counter::kIsRate);
}

/// The fp16 lm_head of an AutoAWQ checkpoint (AutoAWQ keeps it unquantized), one decode token on
/// one thread, weights streamed from DRAM: Llama-2-7B's 32000 x 4096 (262 MB) and TinyLlama's
/// 32000 x 2048. Counter: GB/s of weights, to set beside QLinear's int4 figures.
void BM_DenseLmHeadF16(benchmark::State& state) {
  const int64_t in = state.range(0), out = state.range(1);
  run_dense(state, perfx::DType::F16, "lm_head.weight", in, out, 1);
  state.counters["GB/s"] = benchmark::Counter(
      2.0 * in * out * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_DenseLmHeadF16)
    ->Name("DenseLmHead_f16")
    ->Args({4096, 32000})
    ->Args({2048, 32000})
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_DenseLinear)
    ->Name("DenseLinear_bf16")
    ->ArgsProduct({{256}, {1024}, {1, 2, 8, 64, 256}})
    ->ArgsProduct({{768}, {256}, {64}})
    ->ArgsProduct({{4096}, {4096}, {1, 64}})
    ->Unit(benchmark::kMicrosecond);
