// SPDX-License-Identifier: Apache-2.0
// The raw device figure of bench (bench.hpp): plain sequential I/O on the pool file through
// io_uring, no KV logic at all, at the best settings a sweep finds.
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

std::string RawSetting::label() const {
  const std::string size = io >= (1u << 20) ? std::to_string(io >> 20) + "MiB" : std::to_string(io >> 10) + "KiB";
  return size + "-" + std::to_string(threads) + "x" + std::to_string(depth);
}

RawMeasure raw_bandwidth(const std::string& path, uint64_t offset, uint64_t bytes, bool write, const RawSetting& s) {
  RawMeasure m;
  Fd fd(::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC));
  if (!fd) fd = Fd(::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_CLOEXEC));  // tmpfs without O_DIRECT
  if (!fd) return m;
  const uint64_t count = (bytes + s.io - 1) / s.io;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> ok{true};
  // Buffers and rings are set up before the clock starts. What is written is incompressible,
  // like KV: a device that compresses (zram, some SSDs) or skips zero pages must do its work.
  std::vector<AlignedBuffer> bufs;
  std::vector<io_uring> rings(s.threads);
  for (unsigned t = 0; t < s.threads; ++t) {
    bufs.emplace_back(s.io * s.depth);
    if (write) {
      auto* w = reinterpret_cast<uint64_t*>(bufs.back().data());
      uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t{t} << 32);
      for (size_t i = 0; i < bufs.back().size() / 8; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
        w[i] = x;
      }
    }
    if (io_uring_queue_init(s.depth, &rings[t], 0) != 0) {
      for (unsigned r = 0; r < t; ++r) io_uring_queue_exit(&rings[r]);
      return m;
    }
  }
  auto worker = [&](unsigned t) {
    AlignedBuffer& buf = bufs[t];
    io_uring& ring = rings[t];
    unsigned inflight = 0, slot = 0;
    bool more = true;
    while ((more || inflight) && ok) {
      while (more && inflight < s.depth) {
        uint64_t i = next.fetch_add(1);
        if (i >= count) {
          more = false;
          break;
        }
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        void* p = buf.data() + (slot++ % s.depth) * s.io;
        unsigned len = static_cast<unsigned>(std::min(s.io, bytes - i * s.io));
        if (write)
          io_uring_prep_write(sqe, fd.get(), p, len, offset + i * s.io);
        else
          io_uring_prep_read(sqe, fd.get(), p, len, offset + i * s.io);
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
  const double c0 = process_cpu_s(), t0 = now_s();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < s.threads; ++t) workers.emplace_back(worker, t);
  for (auto& t : workers) t.join();
  if (write) ::fdatasync(fd.get());
  const double t = now_s() - t0;
  m.cpu_s = process_cpu_s() - c0;
  for (auto& r : rings) io_uring_queue_exit(&r);
  m.gbps = ok && t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0;
  return m;
}

// Threads x depth x I/O size, each measured once on a sample of the range (at most 1 GiB, so the
// whole sweep takes seconds on a slow disk). A device is fastest at different settings: a
// virtio disk at few deep queues, zram or tmpfs at a thread per core (each copy or compression
// runs in the submitting thread).
RawSetting best_raw_setting(const std::string& path, uint64_t offset, uint64_t bytes, bool write) {
  const uint64_t sample = std::min<uint64_t>(bytes, 1ull << 30);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  RawSetting best;
  double best_gbps = -1;
  for (unsigned threads : {1u, 2u, 4u, 8u, 16u}) {
    if (threads > 2 * cores) break;
    for (unsigned depth : {4u, 16u, 64u})
      for (uint64_t io : {uint64_t{256} << 10, uint64_t{1} << 20, uint64_t{4} << 20}) {
        if (threads * depth * io > sample) continue;  // more in flight than there is to move
        const RawSetting s{threads, depth, io};
        const double g = raw_bandwidth(path, offset, sample, write, s).gbps;
        if (g > best_gbps) best_gbps = g, best = s;
      }
  }
  return best;
}

}  // namespace tutti::cli
