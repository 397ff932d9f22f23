// SPDX-License-Identifier: Apache-2.0
// touch_mapped: a touch of a mapped file that another process truncated is a failed call, not a
// SIGBUS that kills the process.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/dram.hpp"

namespace tutti {
namespace {

constexpr size_t kBytes = 4 * 4096;

struct MappedFile {
  std::string path;
  int fd = -1;
  std::byte* map = nullptr;
  MappedFile() {
    char tmpl[] = "/tmp/tutti-dram-map-XXXXXX";
    fd = ::mkstemp(tmpl);
    path = tmpl;
    EXPECT_EQ(::ftruncate(fd, kBytes), 0);
    map = static_cast<std::byte*>(::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(map, MAP_FAILED);
  }
  ~MappedFile() {
    ::munmap(map, kBytes);
    ::close(fd);
    ::unlink(path.c_str());
  }
  // As another process would: through its own descriptor.
  void truncate_elsewhere(off_t size) {
    pid_t pid = ::fork();
    if (pid == 0) _exit(::truncate(path.c_str(), size) == 0 ? 0 : 1);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
};

TEST(DramMap, TouchOfATruncatedFileFailsInsteadOfKilling) {
  MappedFile f;
  std::vector<std::byte> buf(kBytes, std::byte{0x5a});
  EXPECT_TRUE(touch_mapped([&] { std::memcpy(f.map, buf.data(), kBytes); }));
  f.truncate_elsewhere(4096);  // the first page stays, the other three are gone
  EXPECT_TRUE(touch_mapped([&] { std::memcpy(buf.data(), f.map, 4096); }));
  EXPECT_EQ(buf[100], std::byte{0x5a});
  for (int round = 0; round < 3; ++round) {  // the handler stays installed, SIGBUS unblocked
    EXPECT_FALSE(touch_mapped([&] { std::memcpy(buf.data(), f.map, kBytes); }));
    EXPECT_FALSE(touch_mapped([&] { std::memset(f.map + 2 * 4096, 0, 4096); }));
  }
  ASSERT_EQ(::ftruncate(f.fd, kBytes), 0);  // grown again: the pages are back (zero)
  EXPECT_TRUE(touch_mapped([&] { std::memcpy(buf.data(), f.map, kBytes); }));
  EXPECT_EQ(buf[4096], std::byte{0});
}

TEST(DramMap, OtherSigbusKeepsItsDefaultAction) {
  MappedFile f;
  EXPECT_TRUE(touch_mapped([] {}));  // the handler is installed
  EXPECT_EXIT(
      {
        f.truncate_elsewhere(0);
        volatile std::byte b = f.map[0];  // outside touch_mapped: fatal, as without tutti
        (void)b;
        std::exit(0);
      },
      // Killed: by the default action, or by a handler that was there before tutti's (a
      // sanitizer's aborts).
      [](int status) { return WIFSIGNALED(status) || WEXITSTATUS(status) != 0; }, "");
}

}  // namespace
}  // namespace tutti
