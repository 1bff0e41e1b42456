// W4A16 CPU linear: reference vs AVX2 kernel (fp32 and int8 activations), one thread, Llama-2-7B
// shapes (q_proj 4096→4096, down_proj 11008→4096) at T = 1 (decode GEMV) and larger T (prefill
// GEMM). Counters: weight GB/s (int4 nibbles + fp16 scales + u8 zeros read once per call) and
// GFLOP/s.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/w4a16.h"
#include "core/dtype.h"

namespace {

using perfx::cpu::W4A16Matrix;

W4A16Matrix random_matrix(int64_t out, int64_t in) {
  std::mt19937 rng(1);
  W4A16Matrix m;
  m.out = out;
  m.in = in;
  m.group_size = 128;
  m.q.resize(out * in / 8);
  for (auto& w : m.q) w = rng();
  m.scales.resize(out * in / 128);
  m.zeros.resize(out * in / 128);
  for (auto& s : m.scales) s = perfx::fp32_to_fp16(0.001f + (rng() % 100) * 1e-5f);
  for (auto& z : m.zeros) z = rng() % 16;
  return m;
}

enum Kernel { kRef, kAvx2, kAvx2Q8 };

template <Kernel kKernel>
void BM_W4A16(benchmark::State& state) {
  const int64_t in = state.range(0), out = state.range(1);
  const int T = static_cast<int>(state.range(2));
  if (kKernel != kRef && !perfx::cpu::w4a16_have_avx2()) {
    state.SkipWithError("no AVX2");
    return;
  }
  const W4A16Matrix m = random_matrix(out, in);
  std::vector<float> x(T * in), y(T * out);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  for (auto _ : state) {
    if (kKernel == kAvx2)
      perfx::cpu::w4a16_linear_avx2(x.data(), T, in, m, 0, out, y.data(), out);
    else if (kKernel == kAvx2Q8)
      perfx::cpu::w4a16_linear_avx2_q8(x.data(), T, in, m, 0, out, y.data(), out);
    else
      perfx::cpu::w4a16_linear_ref(x.data(), T, in, m, 0, out, y.data(), out);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["weightGB/s"] =
      benchmark::Counter(static_cast<double>(m.bytes()) * iters, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * in * out * T * iters * 1e-9, benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b, const std::vector<int64_t>& ts) {
  for (int64_t t : ts) {
    b->Args({4096, 4096, t});
    b->Args({11008, 4096, t});
  }
  b->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_W4A16<kRef>)->Name("W4A16_ref")->Apply([](auto* b) { shapes(b, {1, 16}); });
BENCHMARK(BM_W4A16<kAvx2>)->Name("W4A16_avx2")->Apply([](auto* b) {
  shapes(b, {1, 2, 3, 4, 16, 64, 256});
});
BENCHMARK(BM_W4A16<kAvx2Q8>)->Name("W4A16_avx2_q8")->Apply([](auto* b) {
  shapes(b, {1, 4, 16, 256});
});
