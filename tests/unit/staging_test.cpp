// Staging hands out equal buffers; writes hold at most half of them, so a load that arrives
// while a store is in flight always finds buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "binding/staging.hpp"

namespace tutti {
namespace {

TEST(Staging, WritesHoldAtMostHalfTheBuffers) {
  Staging s(8 * 4096, 4096);
  ASSERT_EQ(s.count(), 8u);
  std::vector<Staging::Buffer> writes(4);
  for (auto& b : writes) ASSERT_TRUE(s.try_acquire(&b, true));
  Staging::Buffer b;
  EXPECT_FALSE(s.try_acquire(&b, true)) << "a fifth write buffer";
  std::vector<Staging::Buffer> reads(4);
  for (auto& r : reads) ASSERT_TRUE(s.try_acquire(&r, false)) << "the reads' half";
  EXPECT_FALSE(s.try_acquire(&b, false)) << "all eight are out";
  for (auto& r : reads) s.release(r);
  EXPECT_FALSE(s.try_acquire(&b, true)) << "free buffers, but the writes' half is out";
  s.release(writes[0]);
  EXPECT_TRUE(s.try_acquire(&b, true));
  s.release(b);
  for (size_t i = 1; i < writes.size(); ++i) s.release(writes[i]);
}

TEST(Staging, AWriteBlockedOnItsHalfWakesWhenAWriteReleases) {
  Staging s(4 * 4096, 4096);
  Staging::Buffer w0 = s.acquire(true), w1 = s.acquire(true);
  std::atomic<bool> got{false};
  std::thread t([&] {
    Staging::Buffer b = s.acquire(true);
    got = true;
    s.release(b);
  });
  Staging::Buffer r = s.acquire(false);  // a read still finds one, and its release wakes no write
  s.release(r);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got.load());
  s.release(w0);
  t.join();
  EXPECT_TRUE(got.load());
  s.release(w1);
}

// A read and a write both waiting, for different things: a buffer freed while the writes' half
// is still out must reach the read (a single wake-up could go to the write, which sleeps again).
TEST(Staging, AFreedBufferReachesAWaitingReadWhileAWriteWaitsToo) {
  Staging s(2 * 4096, 4096);  // writes may hold one
  Staging::Buffer w = s.acquire(true), r = s.acquire(false);
  std::atomic<int> waiting{0};
  std::atomic<bool> read_got{false};
  std::thread writer([&] {
    ++waiting;
    Staging::Buffer b = s.acquire(true);  // until w is released
    s.release(b);
  });
  std::thread reader([&] {
    ++waiting;
    Staging::Buffer b = s.acquire(false);  // until r is released
    read_got = true;
    s.release(b);
  });
  while (waiting.load() < 2) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // both asleep in acquire
  s.release(r);
  for (int i = 0; i < 200 && !read_got.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(read_got.load()) << "the freed buffer did not reach the waiting read";
  s.release(w);
  reader.join();
  writer.join();
}

TEST(Staging, OneBufferServesWritesToo) {
  Staging s(4096, 4096);
  Staging::Buffer b;
  ASSERT_TRUE(s.try_acquire(&b, true));
  s.release(b);
}

}  // namespace
}  // namespace tutti
