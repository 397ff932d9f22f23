// SPDX-License-Identifier: Apache-2.0
// Staging hands out equal, distinct buffers of its budget; running out blocks until one comes
// back. (Loads and stores each have their own: the runtime's order of reads before writes.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "binding/staging.hpp"

namespace tutti {
namespace {

TEST(Staging, HandsOutEveryBufferOnceThenNone) {
  Staging s(8 * 4096 + 100, 4000);  // buffers round up to 4 KiB; the rest of the budget is unused
  EXPECT_EQ(s.buffer_bytes(), 4096u);
  EXPECT_EQ(s.count(), 8u);
  std::vector<Staging::Buffer> held(8);
  std::set<std::byte*> seen;
  for (auto& b : held) {
    ASSERT_TRUE(s.try_acquire(&b));
    EXPECT_TRUE(seen.insert(b.data).second) << "a buffer handed out twice";
    EXPECT_EQ((b.data - s.arena()) % 4096, 0);
  }
  Staging::Buffer b;
  EXPECT_FALSE(s.try_acquire(&b)) << "a ninth buffer";
  s.release(held[3]);
  ASSERT_TRUE(s.try_acquire(&b));
  EXPECT_EQ(b.data, held[3].data);
  s.release(b);
  for (size_t i = 0; i < held.size(); ++i)
    if (i != 3) s.release(held[i]);
}

TEST(Staging, ABlockedAcquireWakesWhenABufferComesBack) {
  Staging s(2 * 4096, 4096);
  Staging::Buffer a = s.acquire(), b = s.acquire();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    Staging::Buffer c = s.acquire();
    got = true;
    s.release(c);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got.load()) << "an acquire went on with every buffer out";
  s.release(a);
  waiter.join();
  EXPECT_TRUE(got.load());
  s.release(b);
}

TEST(Staging, ABudgetBelowOneBufferStillHoldsOne) {
  Staging s(100, 4096);
  EXPECT_EQ(s.count(), 1u);
  Staging::Buffer b;
  ASSERT_TRUE(s.try_acquire(&b));
  s.release(b);
}

// Two takers of several buffers at once (gpu-uring loads take a whole batch's): each gets all
// of its own or waits holding none, so the second goes on once the first gives its back.
TEST(Staging, TakersOfSeveralNeverHoldPartOfWhatTheOtherWaitsFor) {
  Staging s(8 * 4096, 4096);
  std::vector<Staging::Buffer> first = s.acquire_n(6);
  ASSERT_EQ(first.size(), 6u);
  std::atomic<bool> got{false};
  std::thread second([&] {
    std::vector<Staging::Buffer> mine = s.acquire_n(6);  // 2 free: waits, taking none
    got = true;
    EXPECT_EQ(mine.size(), 6u);
    for (const auto& b : mine) s.release(b);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  Staging::Buffer b;
  EXPECT_TRUE(s.try_acquire(&b)) << "the waiting taker holds some of the two free buffers";
  s.release(b);
  for (const auto& x : first) s.release(x);
  second.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(s.acquire_n(8).size(), 8u);
}

}  // namespace
}  // namespace tutti
