// GraphCache (src/backend/cuda/graph_cache.h), the CUDA backend's decode-graph cache: least
// recently used eviction at the cap, replacement, and release of erased entries; no GPU.
#include "backend/cuda/graph_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perfx::cuda {
namespace {

TEST(GraphCache, AFullCacheEvictsTheLeastRecentlyUsedEntryOnly) {
  GraphCache<int, std::string> c(3);
  EXPECT_FALSE(c.insert(1, "a").has_value());
  EXPECT_FALSE(c.insert(2, "b").has_value());
  EXPECT_FALSE(c.insert(3, "c").has_value());
  ASSERT_NE(c.find(1), nullptr);  // 1 used again: 2 is now the oldest
  const auto evicted = c.insert(4, "d");
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(*evicted, "b");
  EXPECT_EQ(c.size(), 3u);
  EXPECT_FALSE(c.contains(2));
  ASSERT_NE(c.find(1), nullptr);
  EXPECT_EQ(*c.find(1), "a");
  EXPECT_EQ(*c.find(3), "c");
  EXPECT_EQ(*c.find(4), "d");
  // contains() is not a use: after the finds of 1, 3 and 4 above, 1 is the oldest and goes next.
  EXPECT_TRUE(c.contains(1));
  EXPECT_EQ(*c.insert(5, "e"), "a");
}

TEST(GraphCache, InsertingAHeldKeyReplacesAndReturnsItsValue) {
  GraphCache<int, std::string> c(2);
  c.insert(7, "old");
  c.insert(8, "x");
  const auto prev = c.insert(7, "new");
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ(*prev, "old");
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(*c.find(7), "new");
  EXPECT_EQ(*c.find(8), "x");
}

TEST(GraphCache, EraseIfAndClearReleaseEveryRemovedValue) {
  GraphCache<int, int> c(8);
  for (int k = 0; k < 6; ++k) c.insert(k, 10 * k);
  std::vector<int> released;
  c.erase_if([](int k) { return k % 2 == 1; }, [&](int v) { released.push_back(v); });
  EXPECT_EQ(released, (std::vector<int>{10, 30, 50}));
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.find(1), nullptr);
  released.clear();
  c.clear([&](int v) { released.push_back(v); });
  EXPECT_EQ(released, (std::vector<int>{0, 20, 40}));
  EXPECT_EQ(c.size(), 0u);
}

TEST(GraphCache, ACapOfZeroHoldsOne) {
  GraphCache<int, int> c(0);
  EXPECT_EQ(c.cap(), 1u);
  c.insert(1, 1);
  EXPECT_EQ(*c.insert(2, 2), 1);
  EXPECT_EQ(c.size(), 1u);
}

}  // namespace
}  // namespace perfx::cuda
