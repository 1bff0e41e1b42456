#include "runtime/kv_cache.h"

#include <gtest/gtest.h>

#include "perfx/status.h"

using namespace perfx;

TEST(BlockManager, AllocatesSlotsAndFrees) {
  BlockManager bm(4, 4);
  bm.add_sequence(1);
  auto s = bm.append(1, {10, 11, 12, 13, 14});
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0] / 4, s[3] / 4);  // first four share a block
  EXPECT_NE(s[4] / 4, s[0] / 4);
  EXPECT_EQ(bm.used_blocks(), 2);
  EXPECT_EQ(bm.blocks_needed(1, 3), 0);
  EXPECT_EQ(bm.blocks_needed(1, 4), 1);
  bm.remove_sequence(1);
  EXPECT_EQ(bm.used_blocks(), 0);
  EXPECT_EQ(bm.free_blocks(), 4);
}

TEST(BlockManager, FullCacheIsAnError) {
  BlockManager bm(2, 2);
  bm.add_sequence(1);
  bm.append(1, {1, 2, 3, 4});
  EXPECT_THROW(bm.append(1, {5}), Error);
}

TEST(BlockManager, PrefixCachingSharesFullBlocks) {
  BlockManager bm(8, 2);
  bm.add_sequence(1);
  bm.append(1, {1, 2, 3, 4, 5});
  bm.add_sequence(9);
  EXPECT_EQ(bm.match_prefix(9, {1, 2, 3, 4, 5}), 0)
      << "blocks whose K/V were not written yet are shared";
  bm.remove_sequence(9);
  bm.commit(1);
  bm.add_sequence(2);
  // same first 4 tokens -> 2 shared blocks; at least one token is always left to compute
  EXPECT_EQ(bm.match_prefix(2, {1, 2, 3, 4, 9}), 4);
  EXPECT_EQ(bm.block_table(2)[0], bm.block_table(1)[0]);
  EXPECT_EQ(bm.block_table(2)[1], bm.block_table(1)[1]);
  EXPECT_EQ(bm.used_blocks(), 3);
  bm.add_sequence(3);
  EXPECT_EQ(bm.match_prefix(3, {1, 2, 7, 7}), 2);  // diverges in the second block
  bm.add_sequence(4);
  EXPECT_EQ(bm.match_prefix(4, {1, 2}), 0);  // would leave nothing to compute
  bm.remove_sequence(1);
  bm.remove_sequence(2);
  bm.remove_sequence(3);
  bm.remove_sequence(4);
  EXPECT_EQ(bm.used_blocks(), 0);
  // cached blocks survive release and are found again
  bm.add_sequence(5);
  EXPECT_EQ(bm.match_prefix(5, {1, 2, 3, 4, 5}), 4);
}

TEST(BlockManager, EvictsCachedBlocksWhenNeeded) {
  BlockManager bm(2, 2);
  bm.add_sequence(1);
  bm.append(1, {1, 2, 3, 4});
  bm.commit(1);
  bm.remove_sequence(1);
  EXPECT_EQ(bm.free_blocks(), 2);
  bm.add_sequence(2);
  bm.append(2, {9, 9, 9, 9});  // reuses (evicts) the cached blocks
  bm.add_sequence(3);
  EXPECT_EQ(bm.match_prefix(3, {1, 2, 3, 4, 5}), 0);
}

TEST(BlockManager, EvictsPrefixTailsBeforeRoots) {
  BlockManager bm(4, 2);
  bm.add_sequence(1);
  bm.append(1, {1, 2, 3, 4, 5, 6});
  bm.commit(1);
  bm.remove_sequence(1);  // 3 cached blocks, 1 free
  bm.add_sequence(2);
  bm.append(2, {9, 9, 9});  // takes the free block and evicts one cached block
  bm.add_sequence(3);
  EXPECT_EQ(bm.match_prefix(3, {1, 2, 3, 4, 5, 6, 7}), 4)
      << "the root of the cached prefix was evicted first";
}

TEST(BlockManager, UnknownSequenceIsAClearError) {
  BlockManager bm(2, 2);
  EXPECT_THROW(bm.blocks_needed(42, 1), Error);
  EXPECT_THROW(bm.match_prefix(42, {1, 2, 3}), Error);
  EXPECT_THROW(bm.commit(42), Error);
}
