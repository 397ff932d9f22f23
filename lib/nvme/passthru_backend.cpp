// SPDX-License-Identifier: Apache-2.0
#include "nvme/passthru_backend.hpp"

#include <unistd.h>

#include <cerrno>
#include <map>

#include "common/error.hpp"
#include "nvme/extents.hpp"
#include "nvme/namespace.hpp"
#include "nvme/passthru.hpp"

namespace tutti {

std::string passthru_unavailable_reason(const std::vector<int>& fds) {
  try {
    for (int fd : fds) {
      const auto ns = nvme::namespace_of(fd);
      if (::access(ns.ng.c_str(), R_OK) != 0) fail_errno(errno, "open " + ns.ng);
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::unique_ptr<Backend> make_passthru_backend(const BackendConfig& cfg) {
  if (auto why = passthru_unavailable_reason(cfg.fds); !why.empty()) fail(TUTTI_EUNSUPPORTED, "backend passthru: " + why);
  auto spaces = std::make_shared<std::vector<nvme::Namespace>>();
  for (int fd : cfg.fds) spaces->push_back(nvme::namespace_of(fd));
  std::vector<int> fds = cfg.fds;
  const std::string ng = spaces->empty() ? "" : spaces->front().ng;
  return make_thread_backend(cfg, "passthru", "NVMe Read through io_uring on " + ng + ", extents by FIEMAP",
                             [spaces, fds](IoOp& op) -> int64_t {
    if (op.write || op.iov || !op.buf) return -EINVAL;  // staged loads only
    const nvme::Namespace& ns = (*spaces)[op.file];
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
