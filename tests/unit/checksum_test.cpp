// SPDX-License-Identifier: Apache-2.0
// Layer checksums (pool format 2): the page hash is XXH3-64 under tutti's secret, the portable
// reference (which the GPU's warp version follows) equals libxxhash, and the layer sum catches
// flips, zeroed and swapped pages while pieces of an extent add up to the whole.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/checksum.hpp"
#include "kernels/layer_sum.hpp"

namespace tutti {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Checksum, ReferencePageHashEqualsLibxxhash) {
  constexpr sum::Secret secret = sum::make_secret();
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto page = random_bytes(sum::kPageBytes, seed);
    if (seed == 1) std::fill(page.begin(), page.end(), 0);
    if (seed == 2) std::fill(page.begin(), page.end(), 0xff);
    const uint64_t want = XXH3_64bits_withSecret(page.data(), page.size(), secret.bytes, sizeof secret.bytes);
    ASSERT_EQ(sum::page_hash_scalar(page.data(), secret.bytes), want) << "seed " << seed;
    ASSERT_EQ(page_hash(page.data()), want);
  }
}

TEST(Checksum, KnownAnswer) {
  // The sum is part of the on-disk format (secret, terms, finish): it must never change.
  std::vector<uint8_t> extent(3 * sum::kPageBytes);
  for (size_t i = 0; i < extent.size(); ++i) extent[i] = static_cast<uint8_t>(i % 251);
  EXPECT_EQ(layer_sum(extent.data(), extent.size()), 0x3bb726e0d5d0edbfull);
}

TEST(Checksum, PiecesAddUpToTheWhole) {
  auto extent = random_bytes(64 * sum::kPageBytes, 7);
  const uint64_t whole = layer_sum(extent.data(), extent.size());
  uint64_t terms = 0;
  for (uint64_t first = 0; first < 64; first += 16)
    terms += page_terms(extent.data() + first * sum::kPageBytes, first, 16);
  EXPECT_EQ(layer_sum_of_terms(terms, extent.size()), whole);
}

TEST(Checksum, CatchesFlipsZeroedAndSwappedPages) {
  auto extent = random_bytes(32 * sum::kPageBytes, 11);
  const uint64_t good = layer_sum(extent.data(), extent.size());
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    auto bad = extent;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    ASSERT_NE(layer_sum(bad.data(), bad.size()), good);
  }
  auto zeroed = extent;
  std::memset(zeroed.data() + 5 * sum::kPageBytes, 0, sum::kPageBytes);
  EXPECT_NE(layer_sum(zeroed.data(), zeroed.size()), good);
  auto swapped = extent;
  std::swap_ranges(swapped.begin() + 2 * sum::kPageBytes, swapped.begin() + 3 * sum::kPageBytes,
                   swapped.begin() + 9 * sum::kPageBytes);
  EXPECT_NE(layer_sum(swapped.data(), swapped.size()), good);
  // A shorter extent of the same leading bytes is another sum.
  EXPECT_NE(layer_sum(extent.data(), extent.size() - sum::kPageBytes), good);
}

}  // namespace
}  // namespace tutti
