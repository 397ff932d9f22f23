// SPDX-License-Identifier: Apache-2.0
// DramTier on its own: what it keeps, hands back, evicts and forgets.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "datapath/dram_tier.hpp"

namespace tutti {
namespace {

struct Op final : IoOp {  // an extent of `len` bytes at `off` of file 0, in `mem`
  Op(uint64_t off, uint64_t len, std::vector<std::byte>& mem, bool w = false) {
    offset = off, length = len, buf = mem.data(), write = w;
  }
  void complete(int64_t) override {}
};

std::vector<std::byte> bytes(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

TEST(DramTier, KeepsAndHandsBackWholeExtents) {
  DramTier tier(3 * 4096, 4096);
  auto a = bytes(4096, 1), got = bytes(4096, 0);
  Op store(8192, 4096, a, true);
  Op load(8192, 4096, got);
  EXPECT_EQ(tier.acquire(load), -1);
  EXPECT_EQ(tier.misses(), 1u);
  tier.keep(store);
  const int slot = tier.acquire(load);
  ASSERT_GE(slot, 0);
  tier.copy_out(slot, load);
  tier.release(slot);
  EXPECT_EQ(got, a);
  EXPECT_EQ(tier.hits(), 1u);
  Op part(8192, 2048, got);  // not a whole extent: never served
  EXPECT_EQ(tier.acquire(part), -1);
}

TEST(DramTier, NewerBytesReplaceOlderOnes) {
  DramTier tier(2 * 4096, 4096);
  auto a = bytes(4096, 1), b = bytes(4096, 2), got = bytes(4096, 0);
  Op sa(0, 4096, a, true), sb(0, 4096, b, true), load(0, 4096, got);
  tier.keep(sa);
  tier.keep(sb);
  const int slot = tier.acquire(load);
  ASSERT_GE(slot, 0);
  tier.copy_out(slot, load);
  tier.release(slot);
  EXPECT_EQ(got, b);
}

TEST(DramTier, EvictsTheLeastRecentlyUsedButNotWhatIsBeingRead) {
  DramTier tier(2 * 4096, 4096);
  auto m = bytes(4096, 3);
  Op x(0, 4096, m), y(4096, 4096, m), z(8192, 4096, m);
  tier.keep(x);
  tier.keep(y);
  const int held = tier.acquire(x);  // x is now the most recent, and being read
  ASSERT_GE(held, 0);
  tier.keep(z);                      // evicts y
  EXPECT_EQ(tier.acquire(y), -1);
  const int zs = tier.acquire(z);
  EXPECT_GE(zs, 0);
  // Both slots are being read: a fourth extent finds no room and is not kept.
  Op w(12288, 4096, m);
  tier.keep(w);
  EXPECT_EQ(tier.acquire(w), -1);
  tier.release(held);
  tier.release(zs);
}

TEST(DramTier, DropForgetsEveryOverlappingExtent) {
  DramTier tier(4 * 4096, 4096);
  auto m = bytes(4096, 4);
  std::vector<Op> ops;
  for (uint64_t i = 0; i < 4; ++i) ops.emplace_back(i * 4096, 4096, m);
  for (auto& op : ops) tier.keep(op);
  auto small = bytes(100, 5);
  Op partial(4096 + 4000, 200, small, true);  // straddles extents 1 and 2
  tier.drop(partial);
  EXPECT_GE(tier.acquire(ops[0]), 0);
  EXPECT_EQ(tier.acquire(ops[1]), -1);
  EXPECT_EQ(tier.acquire(ops[2]), -1);
  EXPECT_GE(tier.acquire(ops[3]), 0);
}

TEST(DramTier, RefusesACapacityBelowOneExtent) {
  EXPECT_THROW(DramTier tier(4095, 4096), Error);
}

}  // namespace
}  // namespace tutti
