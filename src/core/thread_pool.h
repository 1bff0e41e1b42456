// A fixed pool of worker threads for data-parallel loops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace perfx {

/// CPUs this process may run on: the size of its affinity mask (sched_getaffinity, so `taskset`
/// and container cpusets count), else std::thread::hardware_concurrency(), lowered to a cgroup v2
/// CPU quota when one is set (/sys/fs/cgroup/cpu.max, e.g. `docker --cpus=2`); at least 1.
int available_cpus();

/// CPUs granted by a cgroup v2 `cpu.max` text ("QUOTA PERIOD" in microseconds, or "max PERIOD"):
/// ceil(QUOTA / PERIOD), or 0 when there is no limit or the text does not parse.
int cpus_from_cgroup_cpu_max(const std::string& text);

/// Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread, and waits.
/// The calling thread takes part. Not re-entrant: do not call parallel_for from inside fn.
/// If fn throws on any thread, parallel_for still waits for every chunk, then rethrows the first.
/// Workers spin briefly for the next loop before sleeping, since decode issues many short loops.
/// Totals over every ThreadPool of the process since the last pool_stats_reset(), gathered only
/// while the environment sets PERFX_POOL_STATS=1 (read once; two clock reads per thread per loop).
struct PoolStats {
  uint64_t loops = 0;      // parallel_for calls that forked (n > 1 and more than one thread)
  uint64_t region_ns = 0;  // wall time from fork to join, summed over loops
  uint64_t busy_ns = 0;    // time threads spent inside fn, summed over threads and loops
  uint64_t thread_ns = 0;  // region_ns × threads taking part: busy_ns / thread_ns = utilisation
};
PoolStats pool_stats();
void pool_stats_reset();
bool pool_stats_enabled();

class ThreadPool {
 public:
  /// n_threads <= 0 means available_cpus() (one thread per CPU this process may use; more threads
  /// than CPUs make the spinning workers fight each other).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return (int)workers_.size() + 1; }
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int idx);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;  // first exception of the current loop (guarded by mu_)
};

}  // namespace perfx
