// posix: a pool of threads doing preadv/pwritev. Works anywhere; each thread holds one I/O.
// The same pool serves dram, whose "I/O" is a memcpy to or from the pool's mapping.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/thread_name.hpp"
#include "datapath/backend.hpp"
#include "datapath/dram.hpp"

namespace tutti {
namespace {

class PosixBackend final : public Backend {
 public:
  explicit PosixBackend(const BackendConfig& cfg, const DramPool* dram = nullptr) : fds_(cfg.fds), dram_(dram) {
    unsigned n = cfg.threads ? cfg.threads : 1;
    for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { run(); });
  }
  ~PosixBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  const char* name() const override { return dram_ ? "dram" : "posix"; }
  std::string describe() const override {
    return std::string(name()) + ": " + std::to_string(workers_.size()) + " threads, " +
           (dram_ ? "memcpy with the mapped pool" : "preadv/pwritev");
  }

  void submit(std::span<IoOp* const> ops) override {
    {
      std::lock_guard lock(mu_);
      queue_.insert(queue_.end(), ops.begin(), ops.end());
    }
    if (ops.size() == 1)
      cv_.notify_one();
    else
      cv_.notify_all();
  }

 private:
  void run() {
    name_this_thread(dram_ ? "tutti-dram" : "tutti-posix");
    for (;;) {
      IoOp* op;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and drained
        op = queue_.front();
        queue_.pop_front();
      }
      op->prepare();
      op->complete(execute(*op));
    }
  }

  int64_t execute(IoOp& op) {
    if (dram_) return copy(op);
    const int fd = fds_[op.file];
    op.done = 0;
    while (op.done < op.length) {
      remaining_iovecs(op);
      int cnt = static_cast<int>(std::min<size_t>(op.rest.size(), IOV_MAX));
      off_t off = static_cast<off_t>(op.offset + op.done);
      ssize_t n = op.write ? ::pwritev(fd, op.rest.data(), cnt, off) : ::preadv(fd, op.rest.data(), cnt, off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -errno;
      if (n == 0) return -EIO;  // read past the end of the pool file
      op.done += static_cast<uint64_t>(n);
    }
    return static_cast<int64_t>(op.length);
  }

  int64_t copy(IoOp& op) {
    std::byte* at = dram_->host(op.file, op.offset);
    op.done = 0;
    remaining_iovecs(op);
    for (const iovec& v : op.rest) {
      if (op.write)
        std::memcpy(at, v.iov_base, v.iov_len);
      else
        std::memcpy(v.iov_base, at, v.iov_len);
      at += v.iov_len;
    }
    return static_cast<int64_t>(op.length);
  }

  std::vector<int> fds_;
  const DramPool* dram_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoOp*> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<Backend> make_posix_backend(const BackendConfig& cfg) { return std::make_unique<PosixBackend>(cfg); }
std::unique_ptr<Backend> make_dram_backend(const BackendConfig& cfg, const DramPool& pool) {
  return std::make_unique<PosixBackend>(cfg, &pool);
}

}  // namespace tutti
