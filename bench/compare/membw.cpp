// membw: tiny memory-bandwidth benchmark for the decode roofline in bench/compare/run_peer.sh.
//
//   g++ -O2 -march=native -pthread -o membw membw.cpp
//   ./membw [--threads N] [--bytes B] [--reps R]
//
// read : every thread sums its slice of one buffer of B bytes with 256-bit loads (what a decode step does
//        with the weights); GB/s = B / time.
// copy : memcpy of B bytes per pass, slices split over threads; GB/s = 2*B / time (STREAM convention:
//        bytes read + bytes written).
// Each kernel runs R timed passes after one warm-up pass (a pass = at least 256 MiB of traffic, repeating the
// kernel over the buffer when it is smaller); the best pass is reported. Worker threads persist across passes. Output is one line per kernel,
// "membw <kernel> threads=N bytes=B gbps=X", easy to grep. With B larger than the last-level cache this is the
// DRAM bandwidth; with B equal to a model's weight bytes it is the ceiling for streaming exactly those weights
// (cache-resident when they fit).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

uint64_t read_slice(const uint8_t* p, size_t n) {
#if defined(__AVX2__)
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i*)(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i*)(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i*)(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i*)(p + i + 96)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t t[4];
  _mm256_store_si256((__m256i*)t, a0);
  uint64_t s = t[0] + t[1] + t[2] + t[3];
  for (; i < n; ++i) s += p[i];
  return s;
#else
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const uint64_t* q = (const uint64_t*)p;
  size_t m = n / 8, i = 0;
  for (; i + 4 <= m; i += 4) {
    s0 += q[i];
    s1 += q[i + 1];
    s2 += q[i + 2];
    s3 += q[i + 3];
  }
  return s0 + s1 + s2 + s3;
#endif
}

// Persistent worker threads: each timed pass releases all threads at once (spin flag), every thread runs
// fn(thread_index) `inner` times, and the pass ends when the last thread is done. Returns the best pass time
// divided by `inner`. Threads are created once, so small (cache-resident) buffers are not dominated by thread
// start-up; `inner` makes every pass long enough for the clock.
class Team {
 public:
  explicit Team(int n) : n_(n) {
    for (int t = 1; t < n_; ++t) ts_.emplace_back([this, t] { loop(t); });
  }
  ~Team() {
    stop_ = true;
    gen_.fetch_add(1, std::memory_order_release);
    for (auto& th : ts_) th.join();
  }
  template <class F>
  double best_time(int reps, long inner, F fn) {
    double best = 1e30;
    for (int r = 0; r <= reps; ++r) {  // r == 0: warm-up pass
      job_ = [&](int t) {
        for (long i = 0; i < inner; ++i) fn(t);
      };
      done_.store(0, std::memory_order_relaxed);
      const auto t0 = clk::now();
      gen_.fetch_add(1, std::memory_order_release);
      job_(0);
      done_.fetch_add(1, std::memory_order_acq_rel);
      while (done_.load(std::memory_order_acquire) < n_) {
      }
      const double s = std::chrono::duration<double>(clk::now() - t0).count() / (double)inner;
      if (r > 0) best = std::min(best, s);
    }
    return best;
  }

 private:
  void loop(int t) {
    long seen = 0;
    for (;;) {
      long g;
      while ((g = gen_.load(std::memory_order_acquire)) == seen) {
      }
      seen = g;
      if (stop_) return;
      job_(t);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  int n_;
  std::vector<std::thread> ts_;
  std::function<void(int)> job_;
  std::atomic<long> gen_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace

int main(int argc, char** argv) {
  int n_threads = 2, reps = 10;
  size_t bytes = size_t(256) << 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "membw: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads" || a == "-t") {
      n_threads = std::atoi(next());
    } else if (a == "--bytes" || a == "-b") {
      bytes = std::strtoull(next(), nullptr, 10);
    } else if (a == "--reps" || a == "-r") {
      reps = std::atoi(next());
    } else {
      std::fprintf(stderr, "usage: membw [--threads N] [--bytes B] [--reps R]\n");
      return 2;
    }
  }
  if (n_threads < 1 || reps < 1 || bytes < 4096) {
    std::fprintf(stderr, "membw: need threads>=1, reps>=1, bytes>=4096\n");
    return 2;
  }
  // Round to a multiple of 128 bytes per thread so slices stay 32-byte aligned.
  const size_t unit = 128 * (size_t)n_threads;
  bytes = (bytes + unit - 1) / unit * unit;
  const size_t slice = bytes / n_threads;

  auto* src = (uint8_t*)std::aligned_alloc(64, bytes);
  auto* dst = (uint8_t*)std::aligned_alloc(64, bytes);
  if (!src || !dst) {
    std::fprintf(stderr, "membw: out of memory\n");
    return 1;
  }
  // Each timed pass covers at least 256 MiB of traffic, so small buffers repeat the kernel.
  const long inner = std::max<long>(1, (long)((size_t(256) << 20) / bytes));
  Team team(n_threads);
  // First touch from the thread that will use the slice.
  team.best_time(0, 1, [&](int t) {
    for (size_t i = 0; i < slice; ++i) src[t * slice + i] = (uint8_t)(i * 7 + t);
    std::memset(dst + t * slice, 0, slice);
  });

  std::vector<uint64_t> sink(n_threads * 8);
  const double tr = team.best_time(reps, inner, [&](int t) { sink[t * 8] += read_slice(src + t * slice, slice); });
  const double tc =
      team.best_time(reps, inner, [&](int t) { std::memcpy(dst + t * slice, src + t * slice, slice); });
  uint64_t s = 0;
  for (auto v : sink) s += v;

  std::printf("membw read threads=%d bytes=%zu gbps=%.2f\n", n_threads, bytes, bytes / tr / 1e9);
  std::printf("membw copy threads=%d bytes=%zu gbps=%.2f\n", n_threads, bytes, 2.0 * bytes / tc / 1e9);
  std::fprintf(stderr, "membw: checksum %llu\n", (unsigned long long)(s + dst[bytes / 2]));
  std::free(src);
  std::free(dst);
  return 0;
}
