// SPDX-License-Identifier: Apache-2.0
// The index: allocation, LRU eviction, pinning, recovery from records.
#include <gtest/gtest.h>

#include <algorithm>

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
  ix.abandon(a.slot, false);
  EXPECT_EQ(ix.used(), 0u);
  auto b = ix.allocate(K(2));
  EXPECT_EQ(b.claim, Index::Claim::kAllocated);
  EXPECT_FALSE(b.reused);
}

// A slot whose record write (or tombstone) failed may still carry a durable record: whoever
// takes it next must tombstone it first, however it came back to the free list.
TEST(Index, DirtySlotIsTombstonedBeforeReuse) {
  Index ix(1);
  auto a = ix.allocate(K(1));
  ix.abandon(a.slot, /*dirty=*/true);
  auto b = ix.allocate(K(2));
  ASSERT_EQ(b.claim, Index::Claim::kAllocated);
  EXPECT_EQ(b.slot, a.slot);
  EXPECT_TRUE(b.reused);
  ix.abandon(b.slot, false);  // its tombstone went through, then its data write failed
  EXPECT_FALSE(ix.allocate(K(3)).reused);
}

// A chunk whose bytes failed their checksums is forgotten at once (lookups miss it, a store
// writes it anew), and its slot comes back, to be tombstoned, once no load pins it.
TEST(Index, DiscardedChunkIsMissedAndItsSlotFreedByTheLastUnpin) {
  Index ix(2);
  auto a = ix.allocate(K(1));
  ix.commit(a.slot, ix.next_generation(), {});
  ASSERT_TRUE(ix.pin(K(1)));
  ASSERT_TRUE(ix.pin(K(1)));  // two loads of it
  ix.discard(a.slot);
  EXPECT_FALSE(ix.pin(K(1)));
  EXPECT_EQ(ix.match_prefix({K(1)}), 0u);
  EXPECT_EQ(ix.discarded(), 1u);
  auto again = ix.allocate(K(1));  // stored anew while the other load still reads the old slot
  ASSERT_EQ(again.claim, Index::Claim::kAllocated);
  EXPECT_NE(again.slot, a.slot);
  ix.commit(again.slot, ix.next_generation(), {});
  ix.discard(a.slot);  // the second load saw the damage too
  EXPECT_EQ(ix.discarded(), 1u);
  EXPECT_EQ(ix.pin(K(1)), again.slot);  // the new copy is untouched
  ix.unpin(again.slot);
  auto c = ix.allocate(K(2));
  ASSERT_EQ(c.claim, Index::Claim::kAllocated);
  EXPECT_EQ(c.slot, a.slot);
  EXPECT_TRUE(c.reused);
}

// A store's chunks already present are pinned by allocate: making room for its later chunks
// cannot evict them.
TEST(Index, PresentChunksArePinnedForTheStore) {
  Index ix(2);
  auto a = ix.allocate(K(1));
  ix.commit(a.slot, ix.next_generation(), {});
  auto p = ix.allocate(K(1));
  ASSERT_EQ(p.claim, Index::Claim::kPresent);
  auto b = ix.allocate(K(2));
  ix.commit(b.slot, ix.next_generation(), {});
  EXPECT_EQ(ix.allocate(K(3)).claim, Index::Claim::kAllocated);  // evicts 2, never 1
  EXPECT_EQ(ix.match_prefix({K(1)}), 1u);
  EXPECT_EQ(ix.match_prefix({K(2)}), 0u);
  ix.unpin(p.slot);
}

// A lookup leaves a prefix's first chunk the most recent: eviction takes the chain's end.
TEST(Index, EvictionTakesAChainFromItsEnd) {
  Index ix(3);
  for (uint64_t i = 1; i <= 3; ++i) ix.commit(ix.allocate(K(i)).slot, ix.next_generation(), {});
  EXPECT_EQ(ix.match_prefix({K(1), K(2), K(3)}), 3u);
  ix.allocate(K(4));
  EXPECT_EQ(ix.match_prefix({K(1), K(2), K(3)}), 2u);
}

// Waiting for another store's write: committed is a success even once the chunk is evicted
// again; a failed write is not.
TEST(Index, SettledByTicket) {
  Index ix(1);
  auto w = ix.allocate(K(1));
  auto seen = ix.allocate(K(1));
  ASSERT_EQ(seen.claim, Index::Claim::kBeingWritten);
  ix.commit(w.slot, ix.next_generation(), {});
  auto other = ix.allocate(K(2));  // evicts K(1)
  ASSERT_EQ(other.claim, Index::Claim::kAllocated);
  EXPECT_TRUE(ix.wait_settled(seen.slot, seen.ticket));
  auto seen2 = ix.allocate(K(2));
  ASSERT_EQ(seen2.claim, Index::Claim::kBeingWritten);
  ix.abandon(other.slot, false);
  EXPECT_FALSE(ix.wait_settled(seen2.slot, seen2.ticket));
}

// A rank's index: it hands out only the slots of its share, and recovers only their records.
TEST(Index, ManagesItsRangeOnly) {
  Index ix(3, 10);
  std::vector<Record> rs = {{4, 5, K(1), {}}, {11, 9, K(2), {}}, {13, 7, K(3), {}}};
  EXPECT_TRUE(ix.recover(rs).empty());
  EXPECT_EQ(ix.committed(), 1u);
  EXPECT_FALSE(ix.pin(K(1)));
  EXPECT_FALSE(ix.pin(K(3)));
  std::vector<uint64_t> got;
  for (int i = 10; i < 20; ++i) {
    auto a = ix.allocate(K(i));
    if (a.claim != Index::Claim::kAllocated) break;
    got.push_back(a.slot);
    ix.commit(a.slot, ix.next_generation(), {});
  }
  std::sort(got.begin(), got.end());
  ASSERT_GE(got.size(), 2u);
  for (uint64_t s : got) EXPECT_TRUE(s >= 10 && s < 13) << s;
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
