#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <stdexcept>
#include <vector>

using namespace perfx;

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 50; ++rep) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 50) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPool, ExceptionsAreRethrownAfterAllChunksFinish) {
  ThreadPool pool(3);
  for (int thrower : {0, 1, 2}) {
    std::atomic<int> done{0};
    EXPECT_THROW(pool.parallel_for(3, [&](int64_t b, int64_t) {
      if (b == thrower) throw std::runtime_error("boom");
      done++;
    }), std::runtime_error);
    EXPECT_EQ(done.load(), 2);
  }
  // the pool still works afterwards
  std::atomic<int> sum{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e) { sum += (int)(e - b); });
  EXPECT_EQ(sum.load(), 10);
}

// Bug: the default thread count came from hardware_concurrency(), which ignores `taskset` and
// container cpusets; 16 spinning threads on 2 allowed CPUs made decode ~10x slower.
TEST(ThreadPool, DefaultSizeFollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &saved)) first = c;
  ASSERT_GE(first, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const int n = perfx::available_cpus();
  perfx::ThreadPool pool(0);
  const int size = pool.size();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(size, 1);
  // Restored: the whole mask again (or fewer under a cgroup CPU quota).
  EXPECT_GE(perfx::available_cpus(), 1);
  EXPECT_LE(perfx::available_cpus(), CPU_COUNT(&saved));
}

TEST(ThreadPool, CgroupCpuMaxParsing) {
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max("max 100000\n"), 0);
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max("200000 100000\n"), 2);
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max("150000 100000"), 2);  // 1.5 CPUs: 2 threads
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max("50000 100000"), 1);
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max(""), 0);
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max("garbage"), 0);
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max("12x 100000"), 0);
  EXPECT_EQ(perfx::cpus_from_cgroup_cpu_max("100000 0"), 0);
}
