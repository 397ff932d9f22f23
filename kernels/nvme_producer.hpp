// SPDX-License-Identifier: Apache-2.0
// The GPU producer of the nvme backend: a kernel whose threads turn planned commands into SQEs
// with the same builder the CPU producer uses (kernels/nvme_cmd.hpp), write them into a queue
// pair's submission queue and list pages, and ring its doorbell. On a machine with an NVMe
// controller next to the GPU, the queue memory and the doorbell page come from tutti_kmod's
// mmap, registered with the GPU (the doorbell as I/O memory); no such machine is at hand, so
// this is verified against the CPU producer's bytes (tests/gpu), not against a controller.
#pragma once

#include <cstdint>

#include "kernels/nvme_cmd.hpp"

namespace tutti::gpu {

// A queue pair as the device addresses it.
struct NvmeQueueView {
  void* sq = nullptr;             // depth entries of 64 bytes
  uint32_t depth = 0;
  uint32_t tail = 0;              // the SQ tail before these commands
  void* lists = nullptr;          // one 4 KiB page per command id
  uint64_t lists_bus = 0;         // its bus address
  uint32_t* doorbell = nullptr;   // the SQ tail doorbell
};

// Writes commands[0, n) with command ids first_cid + i into `q` (n < depth, each id's list page
// free), then rings the doorbell with the new tail, on `stream` (a cudaStream_t, or null), and
// waits for it. Every pointer must be device-visible.
void nvme_submit(const nvme::Planned* commands, uint32_t n, const nvme::Segment* segments, uint8_t opcode, uint32_t nsid,
                 bool use_sgl, uint16_t first_cid, const NvmeQueueView& q, void* stream);

}  // namespace tutti::gpu
