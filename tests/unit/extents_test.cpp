// SPDX-License-Identifier: Apache-2.0
// FIEMAP extents of a file on this machine's filesystem: they cover exactly the bytes asked
// for, in order; holes and unwritten (fallocated) ranges are refused, never mapped to LBAs.
#include "nvme/extents.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/error.hpp"

namespace tutti::nvme {
namespace {

struct TempFile {
  TempFile() {
    const char* dir = getenv("TMPDIR");
    path = std::string(dir && *dir ? dir : "/tmp") + "/tutti-extents-XXXXXX";
    fd = mkstemp(path.data());
  }
  ~TempFile() {
    close(fd);
    unlink(path.c_str());
  }
  std::string path;
  int fd;
};

// FIEMAP where this filesystem has it (ext4, xfs, btrfs); tmpfs and overlays may not.
bool have_fiemap(int fd) {
  try {
    file_extents(fd, 0, 4096);
    return true;
  } catch (const Error& e) {
    return e.code() != TUTTI_EUNSUPPORTED && e.code() != TUTTI_EIO;
  }
}

TEST(Extents, CoverTheRangeInOrder) {
  TempFile f;
  ASSERT_GE(f.fd, 0);
  std::vector<char> data(3 << 20, 'x');
  ASSERT_EQ(pwrite(f.fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  if (!have_fiemap(f.fd)) GTEST_SKIP() << "no FIEMAP on the filesystem of " << f.path;
  const auto ext = file_extents(f.fd, 4096, (2 << 20) + 512);
  ASSERT_FALSE(ext.empty());
  uint64_t at = 4096;
  for (const FileExtent& e : ext) {
    EXPECT_EQ(e.logical, at);
    EXPECT_GT(e.length, 0u);
    at += e.length;
  }
  EXPECT_EQ(at, 4096u + (2 << 20) + 512);
}

TEST(Extents, HolesAndUnwrittenRangesAreRefused) {
  TempFile f;
  ASSERT_GE(f.fd, 0);
  ASSERT_EQ(pwrite(f.fd, "y", 1, 0), 1);
  if (!have_fiemap(f.fd)) GTEST_SKIP() << "no FIEMAP on the filesystem of " << f.path;
  ASSERT_EQ(ftruncate(f.fd, 0), 0);
  ASSERT_EQ(pwrite(f.fd, "y", 1, 8 << 20), 1);  // [0, 8 MiB) is a hole
  try {
    file_extents(f.fd, 0, 4096);
    ADD_FAILURE() << "a hole was mapped";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EUNSUPPORTED);
  }
  TempFile g;
  if (fallocate(g.fd, 0, 0, 1 << 20) != 0) GTEST_SKIP() << "no fallocate here";
  try {
    file_extents(g.fd, 0, 1 << 20);
    ADD_FAILURE() << "an unwritten extent was mapped";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EUNSUPPORTED);
  }
}

}  // namespace
}  // namespace tutti::nvme
