// SPDX-License-Identifier: Apache-2.0
// uring: several io_uring rings, each driven by its own thread, so one ring is never the
// ceiling. Pool files are registered (fixed files), staging memory is registered (fixed
// buffers: READ_FIXED/WRITE_FIXED skip per-I/O page pinning), and an eventfd read armed in each
// ring lets submitters wake a thread that is blocked waiting for completions.
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/thread_name.hpp"
#include "common/fd.hpp"
#include "datapath/backend.hpp"
#include "kernels/sqe.hpp"

namespace tutti {
namespace {

constexpr uint64_t kWakeTag = 1;  // user_data of the eventfd read; ops are pointers (never 1)
constexpr uint32_t kMaxRetries = 8;  // an op interrupted (EINTR, EAGAIN) goes again at most this often

class Ring {
 public:
  Ring(const BackendConfig& cfg, unsigned depth) : depth_(depth), stores_(cfg.stores), nice_(cfg.nice) {
    int rc = io_uring_queue_init(depth + 1, &ring_, 0);
    if (rc < 0) fail_errno(-rc, "io_uring_queue_init");
    efd_ = Fd(::eventfd(0, EFD_CLOEXEC));
    if (!efd_) {
      int e = errno;
      io_uring_queue_exit(&ring_);
      fail_errno(e, "eventfd");
    }
    if (!cfg.fds.empty() && io_uring_register_files(&ring_, cfg.fds.data(), static_cast<unsigned>(cfg.fds.size())) == 0)
      fixed_files_ = true;
    fds_ = cfg.fds;
    async_reads_ = cfg.async_reads;
    if (!cfg.staging.empty() &&
        io_uring_register_buffers(&ring_, cfg.staging.data(), static_cast<unsigned>(cfg.staging.size())) == 0)
      fixed_buffers_ = true;
    thread_ = std::thread([this] { run(); });
  }
  ~Ring() {
    stop_.store(true);
    wake();
    thread_.join();
    io_uring_queue_exit(&ring_);
  }

  void push(IoOp* op) {
    std::lock_guard lock(mu_);
    pending_.push_back(op);
  }
  void wake() {
    uint64_t one = 1;
    ssize_t n = ::write(efd_.get(), &one, sizeof one);
    (void)n;  // a full counter still wakes the reader
  }
  bool fixed_files() const { return fixed_files_; }
  bool fixed_buffers() const { return fixed_buffers_; }

 private:
  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, efd_.get(), &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void prep(IoOp* op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    const int fd = fixed_files_ ? static_cast<int>(op->file) : fds_[op->file];
    const uint64_t off = op->offset + op->done;
    // A read the CPU copies goes to io_uring's workers, many at once, not to this one thread.
    const uint8_t async = !op->write && op->file < async_reads_.size() && async_reads_[op->file] ? IOSQE_ASYNC : 0;
    if (op->buf_index >= 0 && fixed_buffers_ && fixed_files_ && op->iov == nullptr) {
      // The same SQE the GPU producer writes (kernels/sqe.hpp).
      *sqe = gpu::fixed_rw_sqe(op->write, op->file, reinterpret_cast<uint64_t>(op->buf + op->done),
                               static_cast<uint32_t>(op->length - op->done), off,
                               static_cast<uint16_t>(op->buf_index), reinterpret_cast<uint64_t>(op), async);
      return;
    }
    remaining_iovecs(*op);
    unsigned cnt = static_cast<unsigned>(std::min<size_t>(op->rest.size(), IOV_MAX));
    if (op->write)
      io_uring_prep_writev(sqe, fd, op->rest.data(), cnt, off);
    else
      io_uring_prep_readv(sqe, fd, op->rest.data(), cnt, off);
    if (fixed_files_) sqe->flags |= IOSQE_FIXED_FILE;
    sqe->flags |= async;
    io_uring_sqe_set_data(sqe, op);
  }

  void run() {
    name_this_thread(stores_ ? "tutti-uring-st" : "tutti-uring");
    nice_this_thread(nice_);
    std::vector<IoOp*> todo;
    size_t next = 0;
    unsigned inflight = 0;
    arm_wake();
    io_uring_submit(&ring_);
    for (;;) {
      if (next == todo.size()) {
        todo.clear();
        next = 0;
        std::lock_guard lock(mu_);
        todo.swap(pending_);
      }
      if (stop_.load() && inflight == 0 && next == todo.size()) break;
      while (inflight < depth_ && next < todo.size()) {
        IoOp* op = todo[next++];
        op->done = 0, op->retries = 0;
        op->prepare();
        prep(op);
        ++inflight;
      }
      int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // The ring itself failed: fail what is queued rather than hang.
        for (; next < todo.size(); ++next) todo[next]->complete(rc);
      }
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        if (cqe->user_data == kWakeTag) {
          arm_wake();
          continue;
        }
        IoOp* op = static_cast<IoOp*>(io_uring_cqe_get_data(cqe));
        if (cqe->res > 0 && op->done + static_cast<uint64_t>(cqe->res) < op->length) {
          op->done += static_cast<uint64_t>(cqe->res);  // short transfer: go on from there
          prep(op);
          continue;
        }
        if ((cqe->res == -EINTR || cqe->res == -EAGAIN) && op->retries++ < kMaxRetries) {
          prep(op);  // interrupted, nothing moved: again, as posix does (a few times at most)
          continue;
        }
        --inflight;
        int64_t res = cqe->res < 0 ? cqe->res : cqe->res == 0 ? -EIO : static_cast<int64_t>(op->length);
        op->complete(res);
      }
      io_uring_cq_advance(&ring_, seen);
    }
  }

  io_uring ring_;
  unsigned depth_;
  bool stores_;
  int nice_;
  Fd efd_;
  uint64_t wake_value_ = 0;
  std::vector<int> fds_;
  std::vector<uint8_t> async_reads_;
  bool fixed_files_ = false;
  bool fixed_buffers_ = false;
  std::mutex mu_;
  std::vector<IoOp*> pending_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class UringBackend final : public Backend {
 public:
  explicit UringBackend(const BackendConfig& cfg)
      : nice_(cfg.nice), async_(!cfg.stores && std::count(cfg.async_reads.begin(), cfg.async_reads.end(), 1) > 0) {
    unsigned n = cfg.rings ? cfg.rings : 1;
    unsigned depth = cfg.queue_depth ? cfg.queue_depth : 64;
    for (unsigned i = 0; i < n; ++i) rings_.push_back(std::make_unique<Ring>(cfg, depth));
    depth_ = depth;
  }
  const char* name() const override { return "uring"; }
  std::string describe() const override {
    return "uring: " + std::to_string(rings_.size()) + " rings x depth " + std::to_string(depth_) +
           (rings_[0]->fixed_files() ? ", fixed files" : "") + (rings_[0]->fixed_buffers() ? ", fixed buffers" : "") +
           (nice_ > 0 ? ", threads at nice " + std::to_string(nice_) : "") +
           (async_ ? ", reads of CPU-copied files by io_uring's workers" : "");
  }
  void submit(std::span<IoOp* const> ops) override {
    // Round-robin: the ops of one layer spread over every ring and thread.
    std::vector<bool> touched(rings_.size());
    for (IoOp* op : ops) {
      size_t r = next_.fetch_add(1, std::memory_order_relaxed) % rings_.size();
      rings_[r]->push(op);
      touched[r] = true;
    }
    for (size_t r = 0; r < rings_.size(); ++r)
      if (touched[r]) rings_[r]->wake();
  }

 private:
  std::vector<std::unique_ptr<Ring>> rings_;
  unsigned depth_ = 0;
  int nice_;
  bool async_;
  std::atomic<size_t> next_{0};
};

}  // namespace

std::string uring_unavailable_reason() {
  io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc == 0) {
    io_uring_queue_exit(&ring);
    return "";
  }
  if (rc == -ENOSYS) return "the kernel has no io_uring";
  if (rc == -EPERM) return "io_uring is disabled (sysctl kernel.io_uring_disabled or a seccomp policy)";
  return std::string("io_uring_queue_init failed: ") + std::strerror(-rc);
}

std::unique_ptr<Backend> make_uring_backend(const BackendConfig& cfg) { return std::make_unique<UringBackend>(cfg); }

}  // namespace tutti
