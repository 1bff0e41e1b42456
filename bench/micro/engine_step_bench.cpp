// Engine::step on models/default: one decode step for B sequences at once (continuous batching's
// inner loop, without HTTP), all threads. Counter: tokens/s (B tokens per step). Each sequence
// holds a 32-token prompt and is restarted before it reaches 256 tokens.
#include <benchmark/benchmark.h>

#include <vector>

#include "perfx/engine.h"

#ifndef PERFX_SOURCE_DIR
#error "PERFX_SOURCE_DIR must name the source tree (for models/default)"
#endif

namespace {

void BM_DecodeStep(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0));
  perfx::EngineOptions o;
  o.model_path = PERFX_SOURCE_DIR "/models/default";
  o.ctx = 256;
  o.kv_cache_tokens = 256 * B;
  auto engine = perfx::Engine::load(o);
  std::vector<perfx::Engine::StepItem> items(static_cast<size_t>(B));
  std::vector<float> logits;
  auto restart = [&] {
    std::vector<perfx::Engine::StepItem> prefill(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) {
      if (items[b].seq) engine->release_sequence(items[b].seq);
      items[b].seq = engine->create_sequence();
      items[b].tokens = {static_cast<int32_t>(100 + b % 50)};
      prefill[b].seq = items[b].seq;
      for (int i = 0; i < 32; ++i)
        prefill[b].tokens.push_back(static_cast<int32_t>(200 + (7 * i + b) % 3000));
    }
    engine->step_logits(prefill, logits);
  };
  restart();
  for (auto _ : state) {
    if (engine->seq_len(items[0].seq) >= 250) {
      state.PauseTiming();
      restart();
      state.ResumeTiming();
    }
    engine->step_logits(items, logits);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(B) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_DecodeStep)
    ->Name("DecodeStep_default")
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
