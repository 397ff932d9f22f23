// SPDX-License-Identifier: Apache-2.0
// Runs inside the QEMU guest: a file on the mounted ext4 of the emulated NVMe namespace, found
// on the device with FIEMAP and read back with NVMe Read commands through io_uring passthrough
// (/dev/ngXnY), must equal what the filesystem returns for it.
//   passthru_test FILE /dev/ngXnY /sys/block/nvmeXnY
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "nvme/extents.hpp"
#include "nvme/passthru.hpp"

namespace {
uint32_t sysfs(const std::string& path) {
  std::ifstream f(path);
  uint32_t v = 0;
  f >> v;
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: passthru_test FILE /dev/ngXnY /sys/block/nvmeXnY\n");
    return 2;
  }
  try {
    const int fd = ::open(argv[1], O_RDONLY);
    if (fd < 0) tutti::fail_errno(errno, std::string("open ") + argv[1]);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    std::vector<char> want(static_cast<size_t>(size));
    void* mem = nullptr;  // page aligned: the kernel maps it page by page for the device
    if (posix_memalign(&mem, 4096, static_cast<size_t>(size)) != 0) tutti::fail(TUTTI_ENOMEM, "posix_memalign");
    char* got = static_cast<char*>(mem);
    if (::pread(fd, want.data(), want.size(), 0) != size) tutti::fail_errno(errno, "pread");
    const auto extents = tutti::nvme::file_extents(fd, 0, static_cast<uint64_t>(size));
    const uint32_t lba = sysfs(std::string(argv[3]) + "/queue/logical_block_size");
    // The most one command may move: the controller's limit, and the segments the kernel may
    // map for it (one per page of a page-aligned buffer).
    const uint32_t max = std::min(sysfs(std::string(argv[3]) + "/queue/max_hw_sectors_kb") * 1024,
                                  sysfs(std::string(argv[3]) + "/queue/max_segments") * 4096);
    std::printf("ok   %s: %lld bytes in %zu extent(s) on the device; LBA %u bytes, largest command %u KiB\n", argv[1],
                static_cast<long long>(size), extents.size(), lba, max / 1024);
    tutti::nvme::Passthru p(argv[2], 1, lba, max);
    const uint32_t commands = p.read(extents, got);
    const bool same = std::memcmp(got, want.data(), want.size()) == 0;
    std::free(got);
    std::printf("%s NVMe passthrough read of its LBAs: %u command(s), bytes %s\n", same ? "ok  " : "FAIL", commands,
                same ? "equal to the file's" : "DIFFER from the file's");
    ::close(fd);
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
}
