#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#define PERFX_PAUSE() _mm_pause()
#else
#define PERFX_PAUSE() std::this_thread::yield()
#endif

namespace perfx {

namespace {
constexpr int kSpinIters = 2000;  // ~tens of microseconds of pause before a worker sleeps

std::atomic<uint64_t> g_loops{0}, g_region{0}, g_busy{0}, g_thread{0};

uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Runs fn(b, e), adding its duration to the busy total when stats are on.
void timed(const std::function<void(int64_t, int64_t)>& fn, int64_t b, int64_t e) {
  if (!pool_stats_enabled()) return fn(b, e);
  const uint64_t t0 = now_ns();
  fn(b, e);
  g_busy.fetch_add(now_ns() - t0, std::memory_order_relaxed);
}
}  // namespace

bool pool_stats_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("PERFX_POOL_STATS");
    return e && std::string(e) == "1";
  }();
  return on;
}

PoolStats pool_stats() {
  PoolStats s;
  s.loops = g_loops.load();
  s.region_ns = g_region.load();
  s.busy_ns = g_busy.load();
  s.thread_ns = g_thread.load();
  return s;
}

void pool_stats_reset() {
  g_loops = 0;
  g_region = 0;
  g_busy = 0;
  g_thread = 0;
}

int cpus_from_cgroup_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (end == quota.c_str() || *end != '\0' || q <= 0) return 0;
  return (int)std::min<long long>((q + period - 1) / period, 1 << 20);
}

int available_cpus() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = (int)std::max(1u, std::thread::hardware_concurrency());
  std::ifstream f("/sys/fs/cgroup/cpu.max");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const int quota = cpus_from_cgroup_cpu_max(text);
  if (quota > 0) n = std::min(n, quota);
  return std::max(1, n);
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = available_cpus();
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

static void chunk(int64_t n, int parts, int idx, int64_t* b, int64_t* e) {
  const int64_t base = n / parts, rem = n % parts;
  *b = idx * base + std::min<int64_t>(idx, rem);
  *e = *b + base + (idx < rem ? 1 : 0);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int parts = size();
  if (parts == 1 || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_ = n;
    pending_.store((int)workers_.size(), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleeping_.load() > 0) cv_start_.notify_all();
  const uint64_t t_fork = pool_stats_enabled() ? now_ns() : 0;
  int64_t b, e;
  chunk(n, parts, 0, &b, &e);
  std::exception_ptr mine;
  try {
    if (b < e) timed(fn, b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kSpinIters)
      PERFX_PAUSE();
    else
      std::this_thread::yield();
  }
  if (pool_stats_enabled()) {
    const uint64_t dt = now_ns() - t_fork;
    g_loops.fetch_add(1, std::memory_order_relaxed);
    g_region.fetch_add(dt, std::memory_order_relaxed);
    g_thread.fetch_add(dt * (uint64_t)parts, std::memory_order_relaxed);
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    err = mine ? mine : error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

void ThreadPool::worker_loop(int idx) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for the next generation, then sleep.
    bool ready = false;
    for (int i = 0; i < kSpinIters; ++i) {
      if (generation_.load(std::memory_order_acquire) != seen || stop_.load()) {
        ready = true;
        break;
      }
      PERFX_PAUSE();
    }
    if (!ready) {
      std::unique_lock<std::mutex> lk(mu_);
      sleeping_.fetch_add(1);
      cv_start_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
      sleeping_.fetch_sub(1);
    }
    if (stop_.load()) return;
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n;
    {
      std::lock_guard<std::mutex> lk(mu_);
      seen = generation_.load();
      fn = fn_;
      n = n_;
    }
    int64_t b, e;
    chunk(n, size(), idx, &b, &e);
    try {
      if (b < e) timed(*fn, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace perfx
