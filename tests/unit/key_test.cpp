// SPDX-License-Identifier: Apache-2.0
// Chunk keys: chained, prefix-consistent, salted, stable across runs.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "resolver/key.hpp"

namespace tutti {

TEST(Key, ChainIsPrefixConsistent) {
  std::vector<int32_t> a(1024), b(1024);
  for (int i = 0; i < 1024; ++i) a[i] = b[i] = i * 7;
  b[700] = -1;  // diverge inside chunk 2 (256-token chunks)
  Key root = root_key("", nullptr, 0);
  auto ka = chunk_keys(root, a.data(), a.size(), 256);
  auto kb = chunk_keys(root, b.data(), b.size(), 256);
  ASSERT_EQ(ka.size(), 4u);
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_EQ(ka[1], kb[1]);
  EXPECT_NE(ka[2], kb[2]);
  EXPECT_NE(ka[3], kb[3]);  // same tokens, different parent
}

TEST(Key, OnlyFullChunks) {
  std::vector<int32_t> t(1000, 3);
  EXPECT_EQ(chunk_keys(root_key("", nullptr, 0), t.data(), t.size(), 256).size(), 3u);
  EXPECT_EQ(chunk_keys(root_key("", nullptr, 0), t.data(), t.size(), 256, 2).size(), 2u);
}

TEST(Key, NamespaceAndSaltSeparate) {
  std::vector<int32_t> t(256, 9);
  auto k = [&](const char* ns, const char* salt) {
    return chunk_key(root_key(ns, salt, salt ? std::strlen(salt) : 0), t.data(), t.size());
  };
  EXPECT_NE(k("", nullptr), k("m", nullptr));
  EXPECT_NE(k("", nullptr), k("", "lora1"));
  EXPECT_NE(k("ab", "c"), k("a", "bc"));  // lengths are part of the root
  EXPECT_EQ(k("m", "s"), k("m", "s"));
}

TEST(Key, RanksSeparate) {
  std::vector<int32_t> t(256, 9);
  auto k = [&](uint32_t rank, uint32_t ranks) { return chunk_key(root_key("m", nullptr, 0, rank, ranks), t.data(), t.size()); };
  EXPECT_EQ(k(0, 1), chunk_key(root_key("m", nullptr, 0), t.data(), t.size()));  // unchanged without ranks
  EXPECT_NE(k(0, 2), k(1, 2));
  EXPECT_NE(k(0, 2), k(0, 4));
  EXPECT_NE(k(0, 1), k(0, 2));
}

TEST(Key, StableValue) {
  // Keys are persisted: this value must never change within a format version.
  std::vector<int32_t> t(4);
  for (int i = 0; i < 4; ++i) t[i] = i;
  Key k1 = chunk_key(root_key("", nullptr, 0), t.data(), t.size());
  Key k2 = chunk_key(root_key("", nullptr, 0), t.data(), t.size());
  EXPECT_EQ(k1, k2);
  EXPECT_NE(k1.lo, 0u);
}

}  // namespace tutti
