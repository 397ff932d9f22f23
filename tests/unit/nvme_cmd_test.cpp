// SPDX-License-Identifier: Apache-2.0
// The NVMe command builder: every field where the NVMe specification puts it, PRP lists that a
// controller walking them by the specification's rules turns back into the right pages, and
// SGLs whose descriptors cover the segments exactly.
#include "kernels/nvme_cmd.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace tutti::nvme {
namespace {

constexpr uint32_t kPage = 4096;

uint64_t dptr(const Sqe& s, int i) { return uint64_t{s.cdw[6 + 2 * i]} | (uint64_t{s.cdw[7 + 2 * i]} << 32); }

TEST(NvmeCmd, ReadCommandFields) {
  Sqe s;
  rw(s, kOpRead, 0xBEEF, 1, 0x1'2345'6789ull, 256);
  EXPECT_EQ(s.cdw[0] & 0xff, kOpRead);
  EXPECT_EQ(s.cdw[0] >> 16, 0xBEEFu);
  EXPECT_EQ(s.cdw[1], 1u);
  EXPECT_EQ(s.cdw[10], 0x23456789u);
  EXPECT_EQ(s.cdw[11], 0x1u);
  EXPECT_EQ(s.cdw[12], 255u);  // 0-based
}

// The pages a controller transfers, walking the PRPs as the specification says: PRP1, then
// PRP2 as the second page or as the list, whose last entry on a full page points to the next.
std::vector<uint64_t> walk_prp(const Sqe& s, uint32_t entries, const std::map<uint64_t, const uint64_t*>& memory) {
  std::vector<uint64_t> pages{dptr(s, 0) / kPage * kPage};
  if (entries == 1) return pages;
  if (entries == 2) {
    pages.push_back(dptr(s, 1));
    return pages;
  }
  uint64_t list = dptr(s, 1);
  const uint32_t per = kPage / 8;
  while (pages.size() < entries) {
    const uint64_t* page = memory.at(list / kPage * kPage) + (list % kPage) / 8;
    for (uint32_t i = static_cast<uint32_t>((list % kPage) / 8); i < per && pages.size() < entries; ++i, ++page) {
      if (i == per - 1 && pages.size() + 1 < entries) {
        list = *page;  // chain
        break;
      }
      pages.push_back(*page);
    }
  }
  return pages;
}

std::vector<uint64_t> pages_of(const std::vector<Segment>& seg) {
  std::vector<uint64_t> out;
  for (const Segment& g : seg)
    for (uint64_t p = g.addr / kPage; p <= (g.addr + g.len - 1) / kPage; ++p) out.push_back(p * kPage);
  return out;
}

void check_prp(const std::vector<Segment>& seg) {
  const uint32_t entries = prp_entries(seg.data(), static_cast<uint32_t>(seg.size()), kPage);
  const uint32_t list_n = prp_list_entries(entries, kPage);
  std::vector<uint64_t> list(list_n + kPage / 8);  // whole list pages
  const uint64_t list_dma = 0x7000'0000;
  std::map<uint64_t, const uint64_t*> memory;
  for (size_t i = 0; i < list.size(); i += kPage / 8) memory[list_dma + i * 8] = &list[i];
  Sqe s;
  rw(s, kOpRead, 1, 1, 0, 8);
  ASSERT_TRUE(prp(s, seg.data(), static_cast<uint32_t>(seg.size()), kPage, list.data(), list_dma));
  EXPECT_EQ((s.cdw[0] >> 14) & 3, 0u);
  EXPECT_EQ(dptr(s, 0), seg[0].addr);  // PRP1 keeps the first segment's offset
  EXPECT_EQ(walk_prp(s, entries, memory), pages_of(seg));
}

TEST(NvmeCmd, PrpOneTwoAndListPages) {
  check_prp({{0x10'0000 + 512, 1024}});                      // inside one page
  check_prp({{0x10'0000 + 512, 4096}});                      // two pages: PRP2 is the page
  check_prp({{0x10'0000 + 512, 3 * 4096}});                  // a list
  check_prp({{0x20'0000, 32768}, {0x90'0000, 32768}});       // two blocks far apart
  check_prp({{0x100'0000, 3u << 20}});                       // 768 pages: the list chains
  check_prp({{0x100'0000, 2u << 21}});                       // 1024 pages
}

TEST(NvmeCmd, PrpRandomPageAlignedScatter) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<Segment> seg;
    const int n = 1 + static_cast<int>(rng() % 80);
    for (int i = 0; i < n; ++i) {
      const uint64_t page = (rng() % 100000) * kPage;
      const uint32_t pages = 1 + static_cast<uint32_t>(rng() % 16);
      seg.push_back({page, pages * kPage});
    }
    seg.front().addr += 4 * (rng() % 1024);  // the first may start inside a page
    seg.front().len -= static_cast<uint32_t>(seg.front().addr % kPage);
    seg.back().len -= 4 * static_cast<uint32_t>(rng() % 1024);  // the last may end inside one
    check_prp(seg);
  }
}

TEST(NvmeCmd, PrpRefusesWhatItCannotDescribe) {
  std::vector<Segment> rows = {{0x10'0000, 256}, {0x20'0000, 256}};  // HND rows: 256-byte runs
  Sqe s;
  uint64_t list[4];
  EXPECT_FALSE(prp_ok(rows.data(), 2, kPage));
  EXPECT_FALSE(prp(s, rows.data(), 2, kPage, list, 0));
  std::vector<Segment> odd = {{0x10'0002, 4094}};  // not dword aligned
  EXPECT_FALSE(prp_ok(odd.data(), 1, kPage));
  std::vector<Segment> mid = {{0x10'0000, 8192}, {0x30'0800, 4096}, {0x40'0000, 4096}};
  EXPECT_FALSE(prp_ok(mid.data(), 3, kPage));  // a middle segment inside a page
}

TEST(NvmeCmd, SglDescribesAnyScatter) {
  std::vector<Segment> rows;
  for (int i = 0; i < 64; ++i) rows.push_back({0x10'0000 + uint64_t(i) * 4096 + 100, 256});
  std::vector<SglDesc> list(rows.size());
  Sqe s;
  rw(s, kOpRead, 9, 1, 0, 32);
  sgl(s, rows.data(), static_cast<uint32_t>(rows.size()), list.data(), 0x5000'0000);
  EXPECT_EQ((s.cdw[0] >> 14) & 3, 1u);  // PSDT: SGL
  EXPECT_EQ(dptr(s, 0), 0x5000'0000u);  // SGL1: Last Segment descriptor -> the list
  EXPECT_EQ(static_cast<uint32_t>(dptr(s, 1)), 64u * 16);
  EXPECT_EQ(dptr(s, 1) >> 60, kSglLastSegment);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(list[i].addr, rows[i].addr);
    EXPECT_EQ(list[i].len, rows[i].len);
    EXPECT_EQ(list[i].id >> 4, kSglDataBlock);
  }
  Sqe one;
  rw(one, kOpWrite, 1, 1, 0, 1);
  sgl(one, rows.data(), 1, list.data(), 0);
  EXPECT_EQ(dptr(one, 0), rows[0].addr);  // a single Data Block descriptor in the command
  EXPECT_EQ(static_cast<uint32_t>(dptr(one, 1)), 256u);
  EXPECT_EQ(dptr(one, 1) >> 60, kSglDataBlock);
}

// One Llama-3-8B chunk-layer (256 tokens, 8 KV heads of 128 fp16: 512 KiB of K and of V) read
// straight into 16-token vLLM blocks: as NHD, 32 runs of one whole 32 KiB block; as HND, 4096
// runs of one 256-byte row. What each data pointer costs, by this builder's rules.
TEST(NvmeCmd, ChunkLayerScatterCosts) {
  auto runs = [](uint32_t run, uint32_t count) {
    std::vector<Segment> seg;
    for (uint32_t i = 0; i < count; ++i) seg.push_back({0x1'0000'0000ull + uint64_t(i) * 3 * 32768, run});
    return seg;
  };
  const auto nhd = runs(32768, 32), hnd = runs(256, 4096);
  EXPECT_TRUE(prp_ok(nhd.data(), 32, kPage));
  EXPECT_EQ(prp_entries(nhd.data(), 32, kPage), 256u);        // 256 PRP entries, one list page
  EXPECT_EQ(prp_list_entries(256, kPage), 255u);
  EXPECT_FALSE(prp_ok(hnd.data(), 4096, kPage));              // PRPs cannot: stage, or one command per row
  // SGL: one descriptor per run, whatever the alignment.
  std::vector<SglDesc> list(4096);
  Sqe s;
  rw(s, kOpRead, 1, 1, 0, 2048);
  sgl(s, hnd.data(), 4096, list.data(), 0);
  EXPECT_EQ(static_cast<uint32_t>(dptr(s, 1)), 4096u * 16);
}

}  // namespace
}  // namespace tutti::nvme
