// SPDX-License-Identifier: Apache-2.0
// lib/nvme/io's planner on made-up bus addresses: where commands end, what their data pointers
// hold, and that the planned segments cover exactly the pieces' bytes in order.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/error.hpp"
#include "nvme/io.hpp"
#include "nvme/queue.hpp"

#include <nvme/types.h>

namespace tutti::nvme {
namespace {

ControllerInfo controller(uint32_t max_bytes, uint32_t lba = 512) {
  ControllerInfo c;
  c.max_bytes = max_bytes;
  c.lba_bytes = lba;
  c.sgl = true;
  return c;
}

// `pages` pages whose bus addresses are all apart (no two contiguous), as pinned memory
// without an IOMMU often is; or all contiguous.
DmaMemory memory(size_t pages, bool contiguous) {
  std::vector<uint64_t> bus(pages);
  for (size_t i = 0; i < pages; ++i) bus[i] = contiguous ? 0x100000000ull + i * 4096 : 0x100000000ull + i * 3 * 4096;
  return DmaMemory(std::move(bus));
}

// Checks the plan against the extents and pieces: commands cover the extents in order, in
// whole LBAs, no larger than MDTS; their segments are the pieces' bus ranges in order.
void check_plan(const Plan& p, const ControllerInfo& ci, const std::vector<FileExtent>& ext,
                const std::vector<Piece>& pieces) {
  std::vector<Segment> want;
  for (const Piece& pc : pieces) pc.mem->segments(pc.offset, pc.len, want);
  // Flatten both into byte runs and compare (segment boundaries may differ where runs merge).
  auto bytes = [](const std::vector<Segment>& v) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const Segment& s : v) {
      if (!out.empty() && out.back().first + out.back().second == s.addr)
        out.back().second += s.len;
      else
        out.push_back({s.addr, s.len});
    }
    return out;
  };
  EXPECT_EQ(bytes(p.segments), bytes(want));
  uint64_t covered = 0, total = 0;
  size_t ei = 0;
  uint64_t eo = 0;
  for (const Planned& c : p.commands) {
    EXPECT_LE(uint64_t{c.blocks} * ci.lba_bytes, ci.max_bytes);
    ASSERT_LT(ei, ext.size());
    EXPECT_EQ(c.slba * ci.lba_bytes, ext[ei].physical + eo) << "commands follow the extents";
    uint64_t seg_bytes = 0;
    for (uint32_t i = 0; i < c.count; ++i) seg_bytes += p.segments[c.first + i].len;
    EXPECT_EQ(seg_bytes, uint64_t{c.blocks} * ci.lba_bytes) << "a command's data pointer covers its LBAs";
    if (p.dp == DataPointer::kPrp) {
      EXPECT_TRUE(prp_ok(&p.segments[c.first], c.count, 4096));
    }
    eo += uint64_t{c.blocks} * ci.lba_bytes;
    covered += uint64_t{c.blocks} * ci.lba_bytes;
    if (eo == ext[ei].length) ++ei, eo = 0;
  }
  for (const FileExtent& e : ext) total += e.length;
  EXPECT_EQ(covered, total);
}

TEST(NvmePlan, BlocksScatteredWithOneSglPerMdts) {
  const DmaMemory mem = memory(256, true);  // behind an IOMMU: contiguous
  std::vector<Piece> pieces;
  for (int i = 0; i < 32; ++i) pieces.push_back({&mem, size_t((i * 7) % 32) * 32768, 32768});
  const std::vector<FileExtent> ext = {{0, 1 << 20, 1 << 20}};
  const ControllerInfo ci = controller(512 << 10);
  const Plan sgl = plan(ci, ext, pieces, DataPointer::kSgl);
  EXPECT_EQ(sgl.commands.size(), 2u);
  check_plan(sgl, ci, ext, pieces);
  const Plan prp = plan(ci, ext, pieces, DataPointer::kPrp);
  EXPECT_EQ(prp.commands.size(), 2u);
  check_plan(prp, ci, ext, pieces);
}

TEST(NvmePlan, SubPagePiecesNeedACommandEachWithPrps) {
  const DmaMemory mem = memory(512, true);
  std::vector<Piece> pieces;
  for (int i = 0; i < 64; ++i) pieces.push_back({&mem, size_t((i * 37 + 11) % 512) * 2048 + 0, 2048});
  const std::vector<FileExtent> ext = {{0, 0, 64 * 2048}};
  const ControllerInfo ci = controller(512 << 10);
  const Plan sgl = plan(ci, ext, pieces, DataPointer::kSgl);
  EXPECT_EQ(sgl.commands.size(), 1u);
  check_plan(sgl, ci, ext, pieces);
  const Plan prp = plan(ci, ext, pieces, DataPointer::kPrp);
  EXPECT_GE(prp.commands.size(), 32u);  // a join inside a page ends a PRP command
  check_plan(prp, ci, ext, pieces);
}

TEST(NvmePlan, APieceTooBigForOneListPageIsSplit) {
  // 4 MiB of pages that are all apart: an SGL segment page holds 256 descriptors, a PRP list
  // page 512 entries; MDTS 8 MiB does not stop the command first.
  const DmaMemory mem = memory(1024, false);
  const std::vector<Piece> pieces = {{&mem, 0, 4 << 20}};
  const std::vector<FileExtent> ext = {{0, 0, 4 << 20}};
  const ControllerInfo ci = controller(8 << 20);
  const Plan sgl = plan(ci, ext, pieces, DataPointer::kSgl);
  EXPECT_EQ(sgl.commands.size(), 4u);
  for (const Planned& c : sgl.commands) EXPECT_LE(c.count, 256u);
  check_plan(sgl, ci, ext, pieces);
  const Plan prp = plan(ci, ext, pieces, DataPointer::kPrp);
  EXPECT_EQ(prp.commands.size(), 2u);
  check_plan(prp, ci, ext, pieces);
}

TEST(NvmePlan, CommandsFollowExtentsAndMdts) {
  const DmaMemory mem = memory(64, true);
  const std::vector<Piece> pieces = {{&mem, 0, 256 << 10}};
  const std::vector<FileExtent> ext = {{0, 1 << 20, 96 << 10}, {96 << 10, 8 << 20, 160 << 10}};
  const ControllerInfo ci = controller(64 << 10);
  const Plan p = plan(ci, ext, pieces, DataPointer::kSgl);
  EXPECT_EQ(p.commands.size(), 5u);  // 64 + 32 KiB, then 64 + 64 + 32 KiB
  check_plan(p, ci, ext, pieces);
}

TEST(NvmePlan, RefusesMismatchedLengthsAndSplitLbas) {
  const DmaMemory mem = memory(4, true);
  const ControllerInfo ci = controller(512 << 10, 4096);
  EXPECT_THROW(plan(ci, {{0, 0, 8192}}, {{&mem, 0, 4096}}, DataPointer::kSgl), Error);
  // PRP cannot join these two 2 KiB pieces, and a command cannot end inside a 4 KiB LBA.
  EXPECT_THROW(plan(ci, {{0, 0, 4096}}, {{&mem, 0, 2048}, {&mem, 8192 + 100, 2048}}, DataPointer::kPrp), Error);
}

// Identify as tutti reads it: a namespace with metadata per LBA (protection information) is
// refused, since its reads would DMA metadata to an address tutti never gave; SGLS 11b is
// reserved, not SGL support.
TEST(NvmeIdentify, MetadataFormatsAreRefusedAndReservedSglsAreNoSgl) {
  nvme_id_ctrl id{};
  nvme_id_ns ns{};
  ns.nsze = 1 << 20;
  ns.flbas = 1;
  ns.lbaf[1].ds = 12;
  id.sgls = 1;
  ControllerInfo c = identify_info(id, ns, 0, 1);
  EXPECT_EQ(c.lba_bytes, 4096u);
  EXPECT_TRUE(c.sgl);
  id.sgls = 3;
  EXPECT_FALSE(identify_info(id, ns, 0, 1).sgl);
  ns.lbaf[1].ms = 8;  // 4096 + 8: protection information
  try {
    identify_info(id, ns, 0, 1);
    ADD_FAILURE() << "a namespace with metadata was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EUNSUPPORTED);
  }
  ns.lbaf[1].ms = 0;
  ns.lbaf[1].ds = 40;  // 1 << 40 would not fit
  EXPECT_THROW(identify_info(id, ns, 0, 1), Error);
}

}  // namespace
}  // namespace tutti::nvme
