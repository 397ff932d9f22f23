#include "nvme/passthru_backend.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <fstream>
#include <map>

#include "common/error.hpp"
#include "nvme/extents.hpp"
#include "nvme/passthru.hpp"

namespace tutti {
namespace {

// Where a pool file's filesystem lives: its NVMe namespace and the partition's offset on it.
struct Namespace {
  std::string ng;            // /dev/ngXnY
  uint32_t nsid = 0, lba = 0, max_bytes = 0;
  uint64_t partition = 0;    // bytes from the namespace's LBA 0 to the filesystem's byte 0
};

uint64_t read_number(const std::string& path) {
  std::ifstream f(path);
  uint64_t v = 0;
  if (!(f >> v)) fail(TUTTI_EUNSUPPORTED, "cannot read " + path);
  return v;
}

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
  ns.ng = "/dev/ng" + name.substr(4);
  ns.nsid = static_cast<uint32_t>(read_number(path + "/nsid"));
  ns.lba = static_cast<uint32_t>(read_number(path + "/queue/logical_block_size"));
  // One command moves at most what the controller allows and what the kernel maps for it
  // (a segment per page of the page-aligned staging buffers).
  ns.max_bytes = static_cast<uint32_t>(std::min<uint64_t>(read_number(path + "/queue/max_hw_sectors_kb") * 1024,
                                                           read_number(path + "/queue/max_segments") * 4096));
  if (::access(ns.ng.c_str(), R_OK) != 0) fail_errno(errno, "open " + ns.ng);
  return ns;
}

}  // namespace

std::string passthru_unavailable_reason(const std::vector<int>& fds) {
  try {
    for (int fd : fds) namespace_of(fd);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::unique_ptr<Backend> make_passthru_backend(const BackendConfig& cfg) {
  auto spaces = std::make_shared<std::vector<Namespace>>();
  for (int fd : cfg.fds) spaces->push_back(namespace_of(fd));
  std::vector<int> fds = cfg.fds;
  const std::string ng = spaces->empty() ? "" : spaces->front().ng;
  return make_thread_backend(cfg, "passthru", "NVMe Read through io_uring on " + ng + ", extents by FIEMAP",
                             [spaces, fds](IoOp& op) -> int64_t {
    if (op.write || op.iov || !op.buf) return -EINVAL;  // staged loads only
    const Namespace& ns = (*spaces)[op.file];
    // One ring per worker thread and namespace.
    thread_local std::map<std::string, std::unique_ptr<nvme::Passthru>> rings;
    try {
      auto& ring = rings[ns.ng];
      if (!ring) ring = std::make_unique<nvme::Passthru>(ns.ng, ns.nsid, ns.lba, ns.max_bytes);
      auto extents = nvme::file_extents(fds[op.file], op.offset, op.length);
      for (auto& e : extents) e.physical += ns.partition;
      ring->read(extents, op.buf);
      return static_cast<int64_t>(op.length);
    } catch (const Error& e) {
      return e.code() == TUTTI_EUNSUPPORTED ? -EOPNOTSUPP : -EIO;
    }
  });
}

}  // namespace tutti
