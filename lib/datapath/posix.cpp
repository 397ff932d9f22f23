// posix: a pool of threads doing preadv/pwritev. Works anywhere; each thread holds one I/O.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/thread_name.hpp"
#include "datapath/backend.hpp"

namespace tutti {
namespace {

class PosixBackend final : public Backend {
 public:
  explicit PosixBackend(const BackendConfig& cfg) : fds_(cfg.fds) {
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

  const char* name() const override { return "posix"; }
  std::string describe() const override { return "posix: " + std::to_string(workers_.size()) + " threads, preadv/pwritev"; }

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
    name_this_thread("tutti-posix");
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

  std::vector<int> fds_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoOp*> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<Backend> make_posix_backend(const BackendConfig& cfg) { return std::make_unique<PosixBackend>(cfg); }

}  // namespace tutti
