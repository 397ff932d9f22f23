// SPDX-License-Identifier: Apache-2.0
// posix: a pool of threads doing preadv/pwritev. Works anywhere; each thread holds one I/O.
// The same pool serves dram (memcpy with the mapped pool) and cufile (cuFileRead/Write): only
// the transfer differs.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "common/thread_name.hpp"
#include "datapath/backend.hpp"
#include "datapath/dram.hpp"

namespace tutti {
namespace {

class ThreadPoolBackend final : public Backend {
 public:
  ThreadPoolBackend(const BackendConfig& cfg, std::string name, std::string describe, Transfer transfer)
      : name_(std::move(name)),
        describe_(std::move(describe)),
        thread_name_("tutti-" + name_ + (cfg.stores ? "-st" : "")),
        nice_(cfg.nice),
        transfer_(std::move(transfer)) {
    unsigned n = cfg.threads ? cfg.threads : 1;
    for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { run(); });
  }
  ~ThreadPoolBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  const char* name() const override { return name_.c_str(); }
  std::string describe() const override {
    return name_ + ": " + std::to_string(workers_.size()) + " threads" + (nice_ > 0 ? " at nice " + std::to_string(nice_) : "") +
           ", " + describe_;
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
    name_this_thread(thread_name_.c_str());
    nice_this_thread(nice_);
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
      op->done = 0;
      op->complete(transfer_(*op));
    }
  }

  const std::string name_, describe_, thread_name_;
  const int nice_;
  const Transfer transfer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoOp*> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<Backend> make_thread_backend(const BackendConfig& cfg, std::string name, std::string describe,
                                             Transfer transfer) {
  return std::make_unique<ThreadPoolBackend>(cfg, std::move(name), std::move(describe), std::move(transfer));
}

std::unique_ptr<Backend> make_posix_backend(const BackendConfig& cfg) {
  return make_thread_backend(cfg, "posix", "preadv/pwritev", [fds = cfg.fds](IoOp& op) -> int64_t {
    const int fd = fds[op.file];
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
  });
}

std::unique_ptr<Backend> make_dram_backend(const BackendConfig& cfg, const DramPool& pool) {
  return make_thread_backend(cfg, "dram", "memcpy with the mapped pool", [&pool](IoOp& op) -> int64_t {
    std::byte* at = pool.host(op.file, op.offset);
    remaining_iovecs(op);
    const bool ok = touch_mapped([&] {
      for (const iovec& v : op.rest) {
        if (op.write)
          std::memcpy(at, v.iov_base, v.iov_len);
        else
          std::memcpy(v.iov_base, at, v.iov_len);
        at += v.iov_len;
      }
    });
    if (!ok) return -EIO;  // the pool file was truncated under the mapping
    return static_cast<int64_t>(op.length);
  });
}

}  // namespace tutti
