// SPDX-License-Identifier: Apache-2.0
// Where a pool file's bytes lie on its block device (FIEMAP), so the nvme backends can address
// them as LBAs while the filesystem stays mounted and in charge of the file.
#pragma once

#include <cstdint>
#include <vector>

namespace tutti::nvme {

struct FileExtent {
  uint64_t logical;   // byte offset in the file
  uint64_t physical;  // byte offset on the device
  uint64_t length;
};

// The extents covering [offset, offset + length) of the file, clipped to that range, in order.
// Throws EUNSUPPORTED when a byte is not plainly on the device (a hole, an unwritten or
// delayed extent, inline or encoded data): reading its LBAs would not return the file's bytes.
std::vector<FileExtent> file_extents(int fd, uint64_t offset, uint64_t length);

}  // namespace tutti::nvme
