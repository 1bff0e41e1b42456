#include "core/thread_pool.h"

#include <gtest/gtest.h>

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
