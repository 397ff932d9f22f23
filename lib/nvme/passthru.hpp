// SPDX-License-Identifier: Apache-2.0
// NVMe commands on a stock kernel, no module: io_uring IORING_OP_URING_CMD on the namespace's
// generic character device (/dev/ngXnY), 128-byte SQEs carrying the NVMe command.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "nvme/extents.hpp"

struct io_uring;

namespace tutti::nvme {

class Passthru {
 public:
  // `ng`: /dev/ngXnY; `lba_bytes`: the namespace's LBA size; `max_bytes`: the most one command
  // may move (the kernel's max_hw_sectors_kb, and max_segments pages).
  Passthru(const std::string& ng, uint32_t nsid, uint32_t lba_bytes, uint32_t max_bytes);
  ~Passthru();
  Passthru(const Passthru&) = delete;
  Passthru& operator=(const Passthru&) = delete;

  // Reads the device bytes of `extents` (LBA aligned), back to back, into `buf` (page aligned,
  // so that max_bytes never needs more segments than the kernel allows). Returns the number
  // of NVMe commands it took.
  uint32_t read(const std::vector<FileExtent>& extents, void* buf);

 private:
  Fd fd_;
  uint32_t nsid_, lba_bytes_, max_bytes_;
  io_uring* ring_ = nullptr;
};

}  // namespace tutti::nvme
