// SPDX-License-Identifier: Apache-2.0
// NVMe I/O commands (Read/Write) whose data pointer scatters one pool extent straight into the
// engine's blocks, with PRPs or with SGLs (NVMe Base Specification 2.0, 4.1 and 4.3). One source
// for the CPU producer and for GPU threads: everything here is plain arithmetic on caller
// memory, TUTTI_HOST_DEVICE.
#pragma once

#include <cstdint>

#include "kernels/copy_layout.hpp"  // TUTTI_HOST_DEVICE

namespace tutti::nvme {

// A run of memory by its DMA (bus) address, in transfer order.
struct Segment {
  uint64_t addr;
  uint32_t len;
};

// A submission queue entry: 16 dwords.
struct Sqe {
  uint32_t cdw[16];
};

// SGL descriptor (16 bytes): address, length, 3 reserved bytes, identifier (type << 4 | subtype).
struct SglDesc {
  uint64_t addr;
  uint32_t len;
  uint8_t reserved[3];
  uint8_t id;
};
static_assert(sizeof(SglDesc) == 16, "an SGL descriptor is 16 bytes");

constexpr uint8_t kOpWrite = 0x01, kOpRead = 0x02;
constexpr uint8_t kSglDataBlock = 0x0, kSglLastSegment = 0x3;  // descriptor types

// CDW0..CDW1 and the LBA range; the data pointer is filled by prp()/sgl().
TUTTI_HOST_DEVICE inline void rw(Sqe& s, uint8_t opcode, uint16_t cid, uint32_t nsid, uint64_t slba, uint32_t blocks) {
  for (uint32_t& d : s.cdw) d = 0;
  s.cdw[0] = opcode | (uint32_t{cid} << 16);
  s.cdw[1] = nsid;
  s.cdw[10] = static_cast<uint32_t>(slba);
  s.cdw[11] = static_cast<uint32_t>(slba >> 32);
  s.cdw[12] = (blocks - 1) & 0xffff;  // NLB is 0-based
}

TUTTI_HOST_DEVICE inline void set_dptr(Sqe& s, uint64_t lo, uint64_t hi) {
  s.cdw[6] = static_cast<uint32_t>(lo), s.cdw[7] = static_cast<uint32_t>(lo >> 32);
  s.cdw[8] = static_cast<uint32_t>(hi), s.cdw[9] = static_cast<uint32_t>(hi >> 32);
}

// Can PRPs describe these segments? Only the first may start inside a page and only the last
// may end inside one; every address is dword aligned.
TUTTI_HOST_DEVICE inline bool prp_ok(const Segment* seg, uint32_t n, uint32_t page) {
  for (uint32_t i = 0; i < n; ++i) {
    if (seg[i].addr % 4 || seg[i].len == 0) return false;
    if (i > 0 && seg[i].addr % page) return false;
    if (i + 1 < n && (seg[i].addr + seg[i].len) % page) return false;
  }
  return n > 0;
}

// PRP entries the segments need (one per memory page touched).
TUTTI_HOST_DEVICE inline uint32_t prp_entries(const Segment* seg, uint32_t n, uint32_t page) {
  uint32_t e = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t first = seg[i].addr / page, last = (seg[i].addr + seg[i].len - 1) / page;
    e += static_cast<uint32_t>(last - first + 1);
  }
  return e;
}

// PRP list entries (beyond PRP1) for `entries` pages: 0 if PRP2 holds the second page itself;
// list pages chain through their last entry.
TUTTI_HOST_DEVICE inline uint32_t prp_list_entries(uint32_t entries, uint32_t page) {
  if (entries <= 2) return 0;
  const uint32_t per = page / 8, rest = entries - 1;
  uint32_t n = 0, left = rest;
  while (left > per) {  // a full list page: per - 1 entries and a chain pointer
    n += per;
    left -= per - 1;
  }
  return n + left;
}

// Fills the data pointer with PRPs. `list` (with bus address `list_dma`, page aligned, room
// for prp_list_entries()) receives the PRP list. Returns false if PRPs cannot describe them.
TUTTI_HOST_DEVICE inline bool prp(Sqe& s, const Segment* seg, uint32_t n, uint32_t page, uint64_t* list,
                                  uint64_t list_dma) {
  if (!prp_ok(seg, n, page)) return false;
  const uint32_t entries = prp_entries(seg, n, page);
  uint64_t prp1 = seg[0].addr, prp2 = 0;
  uint32_t k = 0;      // page index in the transfer
  uint32_t slot = 0;   // next list slot
  const uint32_t per = page / 8;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t base = seg[i].addr / page * page;
    const uint64_t pages = (seg[i].addr + seg[i].len - 1) / page - seg[i].addr / page + 1;
    for (uint64_t p = 0; p < pages; ++p, ++k) {
      const uint64_t a = base + p * page;
      if (k == 0) continue;  // PRP1
      if (entries == 2) {
        prp2 = a;
        continue;
      }
      // The last slot of a full list page chains to the next one (unless this is the last entry).
      if (slot % per == per - 1 && k + 1 < entries) {
        list[slot] = list_dma + (slot + 1) * 8;
        ++slot;
      }
      list[slot++] = a;
    }
  }
  if (entries > 2) prp2 = list_dma;
  set_dptr(s, prp1, prp2);
  s.cdw[0] &= ~(3u << 14);  // PSDT 00b: PRPs
  return true;
}

// Fills the data pointer with an SGL: one Data Block descriptor in the SQE for one segment,
// else a Last Segment descriptor pointing to `list` (bus address `list_dma`, room for n
// descriptors) of Data Block descriptors. Any byte alignment and length is allowed.
TUTTI_HOST_DEVICE inline void sgl(Sqe& s, const Segment* seg, uint32_t n, SglDesc* list, uint64_t list_dma) {
  auto data = [](uint64_t addr, uint32_t len) {
    SglDesc d{};
    d.addr = addr, d.len = len, d.id = kSglDataBlock << 4;
    return d;
  };
  SglDesc first{};
  if (n == 1) {
    first = data(seg[0].addr, seg[0].len);
  } else {
    for (uint32_t i = 0; i < n; ++i) list[i] = data(seg[i].addr, seg[i].len);
    first.addr = list_dma, first.len = n * 16, first.id = kSglLastSegment << 4;
  }
  set_dptr(s, first.addr, uint64_t{first.len} | (uint64_t{first.id} << 56));
  s.cdw[0] = (s.cdw[0] & ~(3u << 14)) | (1u << 14);  // PSDT 01b: SGLs
}

// A planned command (lib/nvme/io): an LBA range, and the run segs[first, first + count) of
// segments its data pointer describes.
struct Planned {
  uint64_t slba;
  uint32_t blocks;
  uint32_t first, count;
};

// The SQE of a planned command, its data pointer built in its command id's list page `list`
// (bus address `list_bus`). The CPU producer and the GPU producer both call this. Returns the
// data pointer entries written (PRP entries or SGL data descriptors).
TUTTI_HOST_DEVICE inline uint32_t build(Sqe& s, uint8_t opcode, uint16_t cid, uint32_t nsid, const Planned& c,
                                        const Segment* segs, bool use_sgl, void* list, uint64_t list_bus) {
  rw(s, opcode, cid, nsid, c.slba, c.blocks);
  const Segment* seg = segs + c.first;
  if (use_sgl) {
    sgl(s, seg, c.count, static_cast<SglDesc*>(list), list_bus);
    return c.count;
  }
  prp(s, seg, c.count, 4096, static_cast<uint64_t*>(list), list_bus);
  return prp_entries(seg, c.count, 4096);
}

}  // namespace tutti::nvme
