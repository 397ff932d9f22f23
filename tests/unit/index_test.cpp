// The index: allocation, LRU eviction, pinning, recovery from records.
#include <gtest/gtest.h>

#include "index/index.hpp"

namespace tutti {

static Key K(uint64_t i) { return Key{i, ~i}; }

TEST(Index, AllocateCommitMatch) {
  Index ix(4);
  auto a = ix.allocate(K(1));
  ASSERT_EQ(a.claim, Index::Claim::kAllocated);
  EXPECT_FALSE(a.reused);
  EXPECT_EQ(ix.match_prefix({K(1)}), 0u);  // writing: invisible
  EXPECT_EQ(ix.allocate(K(1)).claim, Index::Claim::kBeingWritten);
  ix.commit(a.slot, ix.next_generation(), {1, 2});
  EXPECT_EQ(ix.match_prefix({K(1), K(2)}), 1u);
  EXPECT_EQ(ix.committed(), 1u);
}

TEST(Index, EvictsLeastRecentlyUsed) {
  Index ix(3);
  for (uint64_t i = 1; i <= 3; ++i) {
    auto a = ix.allocate(K(i));
    ix.commit(a.slot, ix.next_generation(), {});
  }
  ix.match_prefix({K(1)});  // 1 is now the most recent; 2 is the oldest
  auto a = ix.allocate(K(4));
  ASSERT_EQ(a.claim, Index::Claim::kAllocated);
  EXPECT_TRUE(a.reused);
  EXPECT_EQ(ix.match_prefix({K(2)}), 0u);
  EXPECT_EQ(ix.match_prefix({K(1)}), 1u);
  EXPECT_EQ(ix.match_prefix({K(3)}), 1u);
  EXPECT_EQ(ix.evictions(), 1u);
}

TEST(Index, PinnedSlotsAreNeverEvicted) {
  Index ix(2);
  for (uint64_t i = 1; i <= 2; ++i) {
    auto a = ix.allocate(K(i));
    ix.commit(a.slot, ix.next_generation(), {});
  }
  auto p1 = ix.pin(K(1));
  auto p2 = ix.pin(K(2));
  ASSERT_TRUE(p1 && p2);
  EXPECT_EQ(ix.allocate(K(3)).claim, Index::Claim::kFull);
  ix.unpin(*p2);
  auto a = ix.allocate(K(3));
  EXPECT_EQ(a.claim, Index::Claim::kAllocated);
  EXPECT_EQ(a.slot, *p2);
  EXPECT_EQ(ix.match_prefix({K(1)}), 1u);
}

TEST(Index, AbandonFreesTheSlot) {
  Index ix(1);
  auto a = ix.allocate(K(1));
  ix.abandon(a.slot);
  EXPECT_EQ(ix.used(), 0u);
  EXPECT_EQ(ix.allocate(K(2)).claim, Index::Claim::kAllocated);
}

TEST(Index, RecoverKeepsNewestDuplicate) {
  Index ix(4);
  std::vector<Record> rs = {{0, 5, K(1), {}}, {1, 9, K(1), {}}, {2, 7, K(2), {}}};
  auto stale = ix.recover(rs);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0], 0u);
  EXPECT_EQ(ix.committed(), 2u);
  EXPECT_GT(ix.next_generation(), 9u);
  auto p = ix.pin(K(1));
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, 1u);
}

}  // namespace tutti
