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

// Overlapped decode: a step is appended with a placeholder token before its id is sampled; the id
// is set later, only up to the tokens written are committed, and a step begun past the end of
// generation is forgotten again.
TEST(BlockManager, CommitsOnlyTheTokensWritten) {
  BlockManager bm(8, 2);
  bm.add_sequence(1);
  bm.append(1, {1, 2, 3, 4, 5});
  bm.commit(1, 3);  // the step that wrote tokens 3.. is still running
  bm.add_sequence(2);
  EXPECT_EQ(bm.match_prefix(2, {1, 2, 3, 4, 5}), 2) << "only the first block was written";
  bm.remove_sequence(2);
  bm.commit(1);
  bm.add_sequence(3);
  EXPECT_EQ(bm.match_prefix(3, {1, 2, 3, 4, 5}), 4);
  EXPECT_THROW(bm.commit(1, 6), Error) << "more tokens than the sequence has";
}

TEST(BlockManager, SetTokenReplacesAPlaceholderBeforeCommit) {
  BlockManager bm(8, 2);
  bm.add_sequence(1);
  bm.append(1, {1, 2, 3});
  bm.append(1, {0});  // placeholder for an id still on the device
  bm.set_token(1, 3, 4);
  bm.commit(1);
  bm.add_sequence(2);
  EXPECT_EQ(bm.match_prefix(2, {1, 2, 3, 4, 9}), 4) << "the block holds the real token";
  EXPECT_THROW(bm.set_token(1, 1, 7), Error) << "a committed token";
  EXPECT_THROW(bm.set_token(1, 4, 7), Error) << "past the end";
}

TEST(BlockManager, TruncateForgetsUncommittedTokensAndKeepsTheBlocks) {
  BlockManager bm(8, 2);
  bm.add_sequence(1);
  const auto s = bm.append(1, {1, 2, 3});
  bm.commit(1, 2);
  const int used = bm.used_blocks();
  bm.truncate(1, 2);
  EXPECT_EQ(bm.seq_len(1), 2);
  EXPECT_EQ(bm.used_blocks(), used) << "the blocks stay allocated to the sequence";
  EXPECT_EQ(bm.append(1, {7})[0], s[2]) << "the next token takes the forgotten one's slot";
  EXPECT_THROW(bm.truncate(1, 1), Error) << "into a committed block";
  EXPECT_THROW(bm.truncate(1, 4), Error) << "longer than the sequence";
  bm.append(1, {8});
  bm.commit(1);
  bm.add_sequence(2);
  EXPECT_EQ(bm.match_prefix(2, {1, 2, 3, 8, 9}), 2) << "the forgotten 3 is not cached";
  bm.remove_sequence(2);
  bm.add_sequence(3);
  EXPECT_EQ(bm.match_prefix(3, {1, 2, 7, 8, 9}), 4) << "the block holds 7";
}
