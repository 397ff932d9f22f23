// SPDX-License-Identifier: Apache-2.0
// The raw device figure of bench (bench.hpp): plain sequential I/O on the pool file through
// io_uring, no KV logic at all.
#include <fcntl.h>
#include <linux/magic.h>
#include <liburing.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "bench.hpp"
#include "clock.hpp"
#include "resolver/uri.hpp"

namespace tutti::cli {

bool on_tmpfs(const std::string& pool) {
  std::string dir = parse_pool_uri(pool).path;
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

double raw_bandwidth(const std::string& path, uint64_t offset, uint64_t bytes, bool write, unsigned* threads) {
  Fd fd(::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC));
  // tmpfs (with or without O_DIRECT): each copy runs in its submitting thread, so a thread per
  // core, up to 16.
  const bool page_cache = !fd || on_tmpfs(path);
  if (!fd) fd = Fd(::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_CLOEXEC));
  if (!fd) return 0;
  constexpr uint64_t kIo = 1 << 20;
  constexpr unsigned kDepth = 32;
  const unsigned kThreads = page_cache ? std::clamp(std::thread::hardware_concurrency(), 4u, 16u) : 4;
  if (threads) *threads = kThreads;
  const uint64_t count = (bytes + kIo - 1) / kIo;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> ok{true};
  // Buffers and rings are set up before the clock starts.
  std::vector<AlignedBuffer> bufs;
  std::vector<io_uring> rings(kThreads);
  for (unsigned t = 0; t < kThreads; ++t) {
    bufs.emplace_back(kIo * kDepth);
    if (io_uring_queue_init(kDepth, &rings[t], 0) != 0) return 0;
  }
  auto worker = [&](unsigned t) {
    AlignedBuffer& buf = bufs[t];
    io_uring& ring = rings[t];
    unsigned inflight = 0, slot = 0;
    bool more = true;
    while ((more || inflight) && ok) {
      while (more && inflight < kDepth) {
        uint64_t i = next.fetch_add(1);
        if (i >= count) {
          more = false;
          break;
        }
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        void* p = buf.data() + (slot++ % kDepth) * kIo;  // content is irrelevant
        unsigned len = static_cast<unsigned>(std::min(kIo, bytes - i * kIo));
        if (write)
          io_uring_prep_write(sqe, fd.get(), p, len, offset + i * kIo);
        else
          io_uring_prep_read(sqe, fd.get(), p, len, offset + i * kIo);
        ++inflight;
      }
      if (!inflight) break;
      io_uring_submit_and_wait(&ring, 1);
      io_uring_cqe* cqe;
      while (io_uring_peek_cqe(&ring, &cqe) == 0) {
        if (cqe->res <= 0) ok = false;
        io_uring_cqe_seen(&ring, cqe);
        --inflight;
      }
    }
  };
  double t0 = now_s();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < kThreads; ++t) workers.emplace_back(worker, t);
  for (auto& t : workers) t.join();
  if (write) ::fdatasync(fd.get());
  double t = now_s() - t0;
  for (auto& r : rings) io_uring_queue_exit(&r);
  return ok && t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0;
}

}  // namespace tutti::cli
