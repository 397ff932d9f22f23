// SPDX-License-Identifier: Apache-2.0
// Reads a KV object's bytes from the device straight into the memory that wants them (staging,
// or the engine's blocks) with as few NVMe commands as the data pointer allows: a command ends
// at an extent's end, at MDTS, or where its PRP list or SGL segment can describe no more. The
// CPU producer; the commands come from kernels/nvme_cmd.hpp, which the GPU compiles too.
#pragma once

#include <cstdint>
#include <vector>

#include "nvme/extents.hpp"
#include "nvme/queue.hpp"

namespace tutti::nvme {

// `len` bytes at `offset` of DMA-mapped memory.
struct Piece {
  const DmaMemory* mem;
  size_t offset;
  uint64_t len;
};

enum class DataPointer { kPrp, kSgl };

struct IoCounts {
  uint32_t commands = 0;
  uint32_t pointers = 0;  // PRP entries or SGL data descriptors written
  uint16_t status = 0;    // the first failed command's NVMe status, 0 if none failed
};

// The commands that move device bytes `extents` (LBA aligned, in order) into `pieces` (in
// order, the same total). Throws EINVAL if a command would have to end inside an LBA (a piece
// boundary that PRPs cannot cross).
struct Plan {
  std::vector<Planned> commands;
  std::vector<Segment> segments;
  DataPointer dp = DataPointer::kSgl;
};
Plan plan(const ControllerInfo& ci, const std::vector<FileExtent>& extents, const std::vector<Piece>& pieces,
          DataPointer dp);

// Submits a plan's reads on namespace `nsid` through `qp` and returns when every command is
// complete (the CPU producer; kernels/nvme_producer is the GPU's). Throws EIO when the queue
// completes nothing for 30 s: commands may still be in flight, so the queue pair must not be
// used again (deleting it makes the controller drop them).
IoCounts read(QueuePair& qp, uint32_t nsid, const Plan& plan);

inline IoCounts read(QueuePair& qp, const ControllerInfo& ci, uint32_t nsid, const std::vector<FileExtent>& extents,
                     const std::vector<Piece>& pieces, DataPointer dp) {
  return read(qp, nsid, plan(ci, extents, pieces, dp));
}

}  // namespace tutti::nvme
