// SPDX-License-Identifier: Apache-2.0
#include "nvme/passthru.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <linux/nvme_ioctl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "kernels/nvme_cmd.hpp"

namespace tutti::nvme {

Passthru::Passthru(const std::string& ng, uint32_t nsid, uint32_t lba_bytes, uint32_t max_bytes)
    : nsid_(nsid), lba_bytes_(lba_bytes), max_bytes_(max_bytes / lba_bytes * lba_bytes) {
  TUTTI_EXPECT(lba_bytes >= 512 && (lba_bytes & (lba_bytes - 1)) == 0, "LBA size must be a power of two >= 512");
  TUTTI_EXPECT(max_bytes_ > 0, "the largest transfer must hold one LBA");
  fd_ = Fd(::open(ng.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_) fail_errno(errno, "open " + ng);
  ring_ = new io_uring;
  int rc = io_uring_queue_init(64, ring_, IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
  if (rc < 0) {
    delete ring_;
    ring_ = nullptr;
    fail_errno(-rc, "io_uring_setup with 128-byte SQEs (NVMe passthrough needs Linux >= 5.19)");
  }
}

Passthru::~Passthru() {
  if (ring_) {
    io_uring_queue_exit(ring_);
    delete ring_;
  }
}

uint32_t Passthru::read(const std::vector<FileExtent>& extents, void* buf) {
  auto* dst = static_cast<std::byte*>(buf);
  uint32_t commands = 0, inflight = 0;
  int first_error = 0;
  auto reap = [&](bool wait) {
    io_uring_cqe* cqe = nullptr;
    while (inflight && (wait ? io_uring_wait_cqe(ring_, &cqe) : io_uring_peek_cqe(ring_, &cqe)) == 0) {
      if (cqe->res != 0 && !first_error) first_error = cqe->res < 0 ? cqe->res : -EIO;  // NVMe status > 0
      io_uring_cqe_seen(ring_, cqe);
      --inflight;
      wait = false;
    }
  };
  for (const FileExtent& e : extents) {
    TUTTI_EXPECT(e.physical % lba_bytes_ == 0 && e.length % lba_bytes_ == 0, "an extent is not LBA aligned");
    for (uint64_t done = 0; done < e.length;) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(max_bytes_, e.length - done));
      io_uring_sqe* sqe = io_uring_get_sqe(ring_);
      while (!sqe) {  // the ring is full: make room
        io_uring_submit(ring_);
        reap(true);
        sqe = io_uring_get_sqe(ring_);
      }
      std::memset(sqe, 0, 128);
      sqe->opcode = IORING_OP_URING_CMD;
      sqe->fd = fd_.get();
      sqe->cmd_op = NVME_URING_CMD_IO;
      // The NVMe command, built by the same code the queue-owning backends use; the kernel takes
      // the data buffer from addr/data_len and builds the PRPs or SGLs itself.
      Sqe c;
      rw(c, kOpRead, 0, nsid_, (e.physical + done) / lba_bytes_, n / lba_bytes_);
      auto* cmd = reinterpret_cast<nvme_uring_cmd*>(sqe->cmd);
      cmd->opcode = c.cdw[0] & 0xff;
      cmd->nsid = c.cdw[1];
      cmd->cdw10 = c.cdw[10], cmd->cdw11 = c.cdw[11], cmd->cdw12 = c.cdw[12];
      cmd->addr = reinterpret_cast<uint64_t>(dst);
      cmd->data_len = n;
      dst += n, done += n, ++commands, ++inflight;
    }
  }
  io_uring_submit(ring_);
  reap(true);
  while (inflight) reap(true);
  if (first_error) fail(TUTTI_EIO, "NVMe passthrough read failed: " + std::string(first_error < 0 ? std::strerror(-first_error) : "NVMe status"));
  return commands;
}

}  // namespace tutti::nvme
