// SPDX-License-Identifier: Apache-2.0
#include "nvme/namespace.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>

#include "common/error.hpp"

namespace tutti::nvme {
namespace {

uint64_t read_number(const std::string& path) {
  std::ifstream f(path);
  uint64_t v = 0;
  if (!(f >> v)) fail(TUTTI_EUNSUPPORTED, "cannot read " + path);
  return v;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

Namespace namespace_of(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) fail_errno(errno, "fstat");
  const std::string dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  char real[PATH_MAX];
  if (!::realpath(dev.c_str(), real)) fail(TUTTI_EUNSUPPORTED, "the pool's filesystem is not on a block device");
  std::string path = real, name = path.substr(path.rfind('/') + 1);
  Namespace ns;
  if (::access((path + "/partition").c_str(), F_OK) == 0) {  // a partition: its namespace is the parent
    ns.partition = read_number(path + "/start") * 512;
    path = path.substr(0, path.rfind('/'));
    name = path.substr(path.rfind('/') + 1);
  }
  if (name.rfind("nvme", 0) != 0) fail(TUTTI_EUNSUPPORTED, "the pool's filesystem is on " + name + ", not an NVMe namespace");
  ns.block = "/sys/block/" + name;
  ns.ng = "/dev/ng" + name.substr(4);
  ns.nsid = static_cast<uint32_t>(read_number(path + "/nsid"));
  ns.lba = static_cast<uint32_t>(read_number(path + "/queue/logical_block_size"));
  // `device` is the controller, or with native multipath the subsystem: both name the NQN.
  ns.subnqn = read_line(path + "/device/subsysnqn");
  // One command moves at most what the controller allows and what the kernel maps for it
  // (a segment per page of the page-aligned staging buffers).
  ns.max_bytes = static_cast<uint32_t>(std::min<uint64_t>(read_number(path + "/queue/max_hw_sectors_kb") * 1024,
                                                           read_number(path + "/queue/max_segments") * 4096));
  return ns;
}

}  // namespace tutti::nvme
