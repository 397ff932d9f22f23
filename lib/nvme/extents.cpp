// SPDX-License-Identifier: Apache-2.0
#include "nvme/extents.hpp"

#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace tutti::nvme {

std::vector<FileExtent> file_extents(int fd, uint64_t offset, uint64_t length) {
  constexpr uint32_t kBatch = 256;
  std::vector<char> buf(sizeof(fiemap) + kBatch * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  std::vector<FileExtent> out;
  uint64_t at = offset;
  const uint64_t end = offset + length;
  const uint32_t bad = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED |
                       FIEMAP_EXTENT_DATA_ENCRYPTED | FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_DATA_INLINE |
                       FIEMAP_EXTENT_DATA_TAIL | FIEMAP_EXTENT_UNWRITTEN;
  while (at < end) {
    *fm = fiemap{};
    fm->fm_start = at;
    fm->fm_length = end - at;
    fm->fm_flags = FIEMAP_FLAG_SYNC;  // data written through the page cache gets its blocks first
    fm->fm_extent_count = kBatch;
    if (::ioctl(fd, FS_IOC_FIEMAP, fm) != 0) fail_errno(errno, "FIEMAP");
    if (fm->fm_mapped_extents == 0) fail(TUTTI_EUNSUPPORTED, "FIEMAP: byte " + std::to_string(at) + " is in a hole");
    for (uint32_t i = 0; i < fm->fm_mapped_extents && at < end; ++i) {
      const fiemap_extent& e = fm->fm_extents[i];
      if (e.fe_logical > at) fail(TUTTI_EUNSUPPORTED, "FIEMAP: bytes from " + std::to_string(at) + " are in a hole");
      if (e.fe_flags & bad)
        fail(TUTTI_EUNSUPPORTED, "FIEMAP: the extent at byte " + std::to_string(e.fe_logical) +
                                     " is not plain data on the device (flags " + std::to_string(e.fe_flags) + ")");
      const uint64_t skip = at - e.fe_logical;
      if (skip >= e.fe_length) continue;
      const uint64_t n = std::min<uint64_t>(e.fe_length - skip, end - at);
      if (!out.empty() && out.back().logical + out.back().length == at &&
          out.back().physical + out.back().length == e.fe_physical + skip)
        out.back().length += n;  // physically contiguous with the one before
      else
        out.push_back(FileExtent{at, e.fe_physical + skip, n});
      at += n;
    }
  }
  return out;
}

}  // namespace tutti::nvme
