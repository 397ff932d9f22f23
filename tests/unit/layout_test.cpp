// SPDX-License-Identifier: Apache-2.0
// Object geometry and the block <-> object mapping of the binding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "binding/kv_binding.hpp"
#include "common/fd.hpp"
#include "resolver/layout.hpp"

namespace tutti {

TEST(Layout, Llama3ChunkLayerIsOneMiB) {
  Shape s{32, 8, 128, 2, 256};
  EXPECT_EQ(s.kv_bytes(), 512u * 1024);
  EXPECT_EQ(s.layer_bytes(), 1u << 20);
  EXPECT_EQ(s.slot_bytes(), 32u << 20);
}

TEST(Layout, SubExtentsAre4KAligned) {
  Shape s{3, 1, 24, 2, 16};  // K = 768 bytes
  EXPECT_EQ(s.v_offset(), 4096u);
  EXPECT_EQ(s.layer_bytes(), 8192u);
  Geometry g(s, 2, 10);
  for (uint64_t slot = 0; slot < g.slots(); ++slot)
    for (uint32_t l = 0; l < s.layers; ++l) {
      Extent e = g.layer_extent(slot, l);
      EXPECT_EQ(e.offset % 4096, 0u);
      EXPECT_EQ(e.file, slot % 2);
      EXPECT_GE(e.offset, g.data_offset());
    }
}

TEST(Layout, SlotsForFileSize) {
  Shape s{32, 8, 128, 2, 256};
  uint64_t n = Geometry::slots_for(s, 1ull << 30);
  EXPECT_GT(n, 0u);
  EXPECT_LE(Geometry::file_bytes_for(s, n), 1ull << 30);
  EXPECT_GT(Geometry::file_bytes_for(s, n + 1), 1ull << 30);
  EXPECT_EQ(Geometry::slots_for(s, 1 << 20), 0u);
}

// Gather then scatter through every layout recovers the blocks exactly, and gather produces
// the token-major object order.
class BindingTest : public ::testing::TestWithParam<int> {};

TEST_P(BindingTest, GatherScatterRoundTrip) {
  const bool hnd = GetParam() == 1;
  const uint32_t layers = 2, blocks = 8, bt = 4, heads = 3, dim = 8, eb = 2, ct = 8;
  tutti_kv_layout l;
  ASSERT_EQ(tutti_kv_layout_init(&l, layers, blocks, bt, heads, dim, eb, hnd), 0);
  const uint64_t per_side = uint64_t{blocks} * l.block_stride;
  AlignedBuffer mem(layers * 2 * per_side);
  auto* p = reinterpret_cast<uint8_t*>(mem.data());
  for (size_t i = 0; i < mem.size(); ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<void*> k(layers);
  for (uint32_t i = 0; i < layers; ++i) k[i] = p + i * 2 * per_side;
  l.k_base = k.data();
  l.v_offset = per_side;
  KvBinding kv(l, ct);
  int32_t table[2] = {5, 2};  // chunk = blocks 5 then 2
  AlignedBuffer obj(kv.shape().layer_bytes());
  kv.gather(1, table, gpu::ChunkSpan{0, 0, ct}, 0, kv.shape().layer_bytes(), obj.data());
  // Token t, head h, of K lies at (t*heads + h)*row in the object.
  const uint64_t row = dim * eb;
  for (uint32_t t = 0; t < ct; ++t)
    for (uint32_t h = 0; h < heads; ++h) {
      const uint8_t* src = p + 1 * 2 * per_side + table[t / bt] * l.block_stride + (t % bt) * l.token_stride + h * l.head_stride;
      ASSERT_EQ(std::memcmp(obj.data() + (t * heads + h) * row, src, row), 0) << "t=" << t << " h=" << h;
    }
  std::vector<uint8_t> before(p, p + mem.size());
  std::memset(p + 2 * per_side, 0, 2 * per_side);  // wipe layer 1
  kv.scatter(1, table, gpu::ChunkSpan{0, 0, ct}, 0, kv.shape().layer_bytes(), obj.data());
  for (uint32_t side = 0; side < 2; ++side)
    for (int32_t b : table)
      ASSERT_EQ(std::memcmp(p + 2 * per_side + side * per_side + b * l.block_stride,
                            before.data() + 2 * per_side + side * per_side + b * l.block_stride, l.block_stride), 0);
}

INSTANTIATE_TEST_SUITE_P(NhdHnd, BindingTest, ::testing::Values(0, 1));

// Any block size against any chunk size (smaller, not dividing, larger), and spans that move
// only some of a chunk's tokens: a gather puts exactly the span's rows in the object and zeros
// elsewhere; a scatter writes exactly the span's rows and not one byte more.
TEST(Binding, AnyBlockSizeAndSpans) {
  const uint32_t layers = 1, heads = 2, dim = 8, eb = 2, ct = 8, blocks = 16;
  const uint64_t row = dim * eb;
  for (int hnd = 0; hnd < 2; ++hnd)
    for (uint32_t bt : {1u, 3u, 4u, 5u, 8u, 12u, 20u}) {
      tutti_kv_layout l;
      ASSERT_EQ(tutti_kv_layout_init(&l, layers, blocks, bt, heads, dim, eb, hnd), 0);
      const uint64_t per_side = uint64_t{blocks} * l.block_stride;
      AlignedBuffer mem(2 * per_side);
      auto* p = reinterpret_cast<uint8_t*>(mem.data());
      for (size_t i = 0; i < mem.size(); ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
      void* k[1] = {p};
      l.k_base = k;
      l.v_offset = per_side;
      KvBinding kv(l, ct);
      // The prompt's block table: block i holds tokens [i*bt, (i+1)*bt).
      std::vector<int32_t> table(blocks);
      for (uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>((i * 7 + 3) % blocks);
      auto at = [&](uint32_t side, uint64_t token, uint32_t h) {
        return p + side * per_side + table[token / bt] * l.block_stride + (token % bt) * l.token_stride + h * l.head_stride;
      };
      const uint32_t chunks = std::min<uint32_t>(blocks * bt / ct, 4);
      for (uint32_t c = 0; c < chunks; ++c)
        for (auto [lo, hi] : {std::pair{0u, ct}, std::pair{3u, ct}, std::pair{0u, 5u}, std::pair{2u, 7u}}) {
          const uint64_t start = uint64_t{c} * ct;
          const gpu::ChunkSpan span{static_cast<uint32_t>(start % bt), lo, hi};
          const int32_t* cb = table.data() + start / bt;
          ASSERT_LE(start / bt + kv.blocks_of(span), table.size());
          SCOPED_TRACE("hnd " + std::to_string(hnd) + " block_tokens " + std::to_string(bt) + " chunk " +
                       std::to_string(c) + " tokens [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
          AlignedBuffer obj(kv.shape().layer_bytes());
          std::memset(obj.data(), 0xee, obj.size());
          kv.gather(0, cb, span, 0, kv.shape().layer_bytes(), obj.data());
          const auto* o = reinterpret_cast<const uint8_t*>(obj.data());
          for (uint32_t side = 0; side < 2; ++side)
            for (uint32_t t = 0; t < ct; ++t)
              for (uint32_t h = 0; h < heads; ++h) {
                const uint8_t* got = o + side * kv.shape().v_offset() + (t * heads + h) * row;
                if (t >= lo && t < hi) {
                  ASSERT_EQ(std::memcmp(got, at(side, start + t, h), row), 0) << "t=" << t;
                } else {
                  for (uint64_t b = 0; b < row; ++b) ASSERT_EQ(got[b], 0) << "t=" << t;
                }
              }
          // Scatter a fresh object: the span's rows change, nothing else does.
          std::vector<uint8_t> fresh(kv.shape().layer_bytes());
          for (size_t i = 0; i < fresh.size(); ++i) fresh[i] = static_cast<uint8_t>(i * 29 + c + 1);
          std::memcpy(obj.data(), fresh.data(), fresh.size());
          std::vector<uint8_t> before(p, p + mem.size());
          kv.scatter(0, cb, span, 0, kv.shape().layer_bytes(), obj.data());
          std::vector<uint8_t> expect = before;
          for (uint32_t side = 0; side < 2; ++side)
            for (uint32_t t = lo; t < hi; ++t)
              for (uint32_t h = 0; h < heads; ++h)
                std::memcpy(expect.data() + (at(side, start + t, h) - p),
                            fresh.data() + side * kv.shape().v_offset() + (t * heads + h) * row, row);
          ASSERT_EQ(std::memcmp(p, expect.data(), expect.size()), 0);
          std::memcpy(p, before.data(), before.size());
        }
    }
}

TEST(Binding, DirectNeedsAlignedBlocks) {
  tutti_kv_layout l;
  tutti_kv_layout_init(&l, 1, 4, 16, 8, 128, 2, 0);  // 32 KiB blocks
  AlignedBuffer mem(2 * 4 * l.block_stride);
  void* k[1] = {mem.data()};
  l.k_base = k;
  l.v_offset = 4 * l.block_stride;
  EXPECT_TRUE(KvBinding(l, 256).direct_capable());
  void* off[1] = {mem.data() + 64};
  l.k_base = off;
  EXPECT_FALSE(KvBinding(l, 256).direct_capable());
  tutti_kv_layout_init(&l, 1, 4, 16, 8, 128, 2, 1);  // HND: runs are 256-byte rows
  l.k_base = k;
  l.v_offset = 4 * l.block_stride;
  EXPECT_FALSE(KvBinding(l, 256).direct_capable());
}

// The copy kernels give each chunk blocks_per_chunk block ids: with blocks of near 2^31 tokens
// that count once wrapped to 0 (the kernels then read ids past the chunk's).
TEST(Binding, HugeBlocksStillGiveAChunkItsBlocks) {
  tutti_kv_layout l;
  tutti_kv_layout_init(&l, 1, 1, 1, 1, 8, 2, 0);
  std::byte mem[64];
  void* k[1] = {mem};
  l.k_base = k;
  l.v_offset = 32;
  for (uint32_t bt : {300u, 0x7fffffffu, 0x80000001u, 0xffffffffu}) {
    l.block_tokens = bt;
    l.token_stride = 16;
    const KvBinding kv(l, 256);
    EXPECT_EQ(kv.copy_layout().blocks_per_chunk, 2u) << bt;  // a chunk starts in one block, ends in the next
  }
}

}  // namespace tutti
