// Int8-activation linear (backend/cpu/qlinear.h), one thread, per ISA: decode GEMV (T = 1..4) on
// weights streamed from DRAM (a ring of copies larger than the last-level cache, so every call
// reads its weight from memory) and prefill GEMM (T = 64, 512) on one matrix. Counters: weight GB/s
// (QMatrix bytes per call) and GOP/s (2 · out · in · T per call).
//   build/bench/perfx_bench --benchmark_filter=QLinear
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/qlinear.h"
#include "core/dtype.h"

namespace {

using namespace perfx;
using namespace perfx::cpu;

QMatrix random_q4(int64_t out, int64_t in, int group, uint32_t seed, bool q4_0 = false) {
  std::mt19937 rng(seed);
  Int4Matrix m;
  m.out = out;
  m.in = in;
  m.group_size = group;
  m.q.resize((size_t)(out * in / 8));
  for (auto& w : m.q) w = rng();
  m.scales.resize((size_t)(out * in / group));
  m.zeros.resize((size_t)(out * in / group));
  for (auto& s : m.scales) s = fp32_to_fp16(0.001f + (float)(rng() % 100) * 1e-5f);
  for (auto& z : m.zeros) z = q4_0 ? 8 : (uint8_t)(rng() % 16);
  return qmatrix_from_int4({&m});
}

void run(benchmark::State& state, QIsa isa, int group, bool q4_0 = false) {
  const int64_t in = state.range(0), out = state.range(1);
  const int T = (int)state.range(2);
  if (!qisa_available(isa)) {
    state.SkipWithError("ISA not available");
    return;
  }
  // Decode: enough copies to exceed a 32 MiB L3 several times over.
  const size_t one = (size_t)(out * in / 2);
  const int copies = T <= 4 ? (int)std::max<size_t>(1, (size_t(256) << 20) / one) : 1;
  std::vector<QMatrix> w;
  for (int c = 0; c < copies; ++c) w.push_back(random_q4(out, in, group, (uint32_t)c + 1, q4_0));
  std::vector<float> x((size_t)(T * in)), y((size_t)(T * out));
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  QActivations a;
  a.resize(T, in);
  quantize_act(x.data(), in, 0, T, a);
  size_t i = 0;
  for (auto _ : state) {
    const QMatrix& m = w[i++ % w.size()];
    qlinear_isa(isa, a, m, 0, m.tiles, y.data(), out);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double iters = (double)state.iterations();
  state.counters["weightGB/s"] =
      benchmark::Counter((double)w[0].bytes() * iters, benchmark::Counter::kIsRate);
  state.counters["GOP/s"] =
      benchmark::Counter(2.0 * (double)(in * out * T) * iters / 1e9, benchmark::Counter::kIsRate);
}

void BM_QLinear_Avx512Vnni_G128(benchmark::State& s) {
  run(s, QIsa::Avx512Vnni, 128);
}
void BM_QLinear_Avx512Vnni_G32(benchmark::State& s) {
  run(s, QIsa::Avx512Vnni, 32);
}
void BM_QLinear_Avx512Vnni_Q4_0(benchmark::State& s) {
  run(s, QIsa::Avx512Vnni, 32, true);
}
void BM_QLinear_AvxVnni_Q4_0(benchmark::State& s) {
  run(s, QIsa::AvxVnni, 32, true);
}
void BM_QLinear_Avx2_G128(benchmark::State& s) {
  run(s, QIsa::Avx2, 128);
}
void BM_QLinear_AvxVnni_G128(benchmark::State& s) {
  run(s, QIsa::AvxVnni, 128);
}

// Llama-2-7B q_proj (4096 -> 4096) and down_proj (11008 -> 4096) shapes.
#define QLINEAR_ARGS            \
  Args({4096, 4096, 1})         \
      ->Args({11008, 4096, 1})  \
      ->Args({4096, 4096, 4})   \
      ->Args({4096, 4096, 64})  \
      ->Args({4096, 4096, 512}) \
      ->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_QLinear_Avx512Vnni_G128)->QLINEAR_ARGS;
BENCHMARK(BM_QLinear_Avx512Vnni_G32)->QLINEAR_ARGS;
BENCHMARK(BM_QLinear_Avx512Vnni_Q4_0)->QLINEAR_ARGS;
BENCHMARK(BM_QLinear_AvxVnni_Q4_0)->QLINEAR_ARGS;
BENCHMARK(BM_QLinear_AvxVnni_G128)->QLINEAR_ARGS;
BENCHMARK(BM_QLinear_Avx2_G128)->QLINEAR_ARGS;

}  // namespace
