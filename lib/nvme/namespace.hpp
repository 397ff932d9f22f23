// SPDX-License-Identifier: Apache-2.0
// The NVMe namespace under a file's filesystem, from sysfs: what the nvme backends need to
// address the file's bytes as LBAs while the stock driver keeps the filesystem mounted.
#pragma once

#include <cstdint>
#include <string>

namespace tutti::nvme {

struct Namespace {
  std::string block;         // /sys/block/nvmeXnY
  std::string ng;            // /dev/ngXnY, its generic char device
  std::string subnqn;        // the NVM subsystem it belongs to
  uint32_t nsid = 0, lba = 0;
  uint32_t max_bytes = 0;    // the most one passthrough command may move
  uint64_t partition = 0;    // bytes from the namespace's LBA 0 to the filesystem's byte 0
};

// Throws EUNSUPPORTED when the file's filesystem is not on an NVMe namespace.
Namespace namespace_of(int fd);

}  // namespace tutti::nvme
