// SPDX-License-Identifier: Apache-2.0
// The raw device figure of bench (bench.hpp): plain sequential I/O on the pool file through
// io_uring, pread/pwrite or memcpy, no KV logic at all, at the best settings a sweep finds.
#include <fcntl.h>
#include <linux/magic.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "bench.hpp"
#include "clock.hpp"
#include "common/error.hpp"
#include "kernels/device.hpp"
#include "resolver/uri.hpp"

namespace tutti::cli {

bool on_tmpfs(const std::string& pool) {
  std::string dir = parse_pool_uri(pool).path;
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

const char* RawSetting::method_name() const {
  return method == kUring ? "uring" : method == kSync ? (write ? "pwrite" : "pread") : "memcpy";
}

namespace {
std::string size_label(uint64_t io) {
  return io >= (1u << 20) ? std::to_string(io >> 20) + "MiB" : std::to_string(io >> 10) + "KiB";
}
}  // namespace

std::string RawSetting::label() const {
  const std::string size = size_label(io);
  return std::string(method_name()) + "-" + size + "-" + std::to_string(threads) +
         (method == kUring ? "x" + std::to_string(depth) : "");
}

namespace {

// One thread's I/O: io_uring with `depth` in flight, or one pread/pwrite or memcpy at a time.
// next() hands out the range's I/Os in order; false once none is left or one failed.
struct RawIo {
  const RawSetting& s;
  int fd;
  std::byte* mapped;  // kMmap: the range, mapped
  uint64_t offset, bytes, count;
  std::atomic<uint64_t>& next;
  std::atomic<bool>& ok;

  unsigned len(uint64_t i) const { return static_cast<unsigned>(std::min(s.io, bytes - i * s.io)); }

  void sync(std::byte* buf) {
    for (uint64_t i; ok && (i = next.fetch_add(1)) < count;) {
      const uint64_t at = i * s.io;
      if (s.method == RawSetting::kMmap) {
        if (s.write)
          std::memcpy(mapped + at, buf, len(i));
        else
          std::memcpy(buf, mapped + at, len(i));
        continue;
      }
      const ssize_t n = s.write ? ::pwrite(fd, buf, len(i), static_cast<off_t>(offset + at))
                                : ::pread(fd, buf, len(i), static_cast<off_t>(offset + at));
      if (n != static_cast<ssize_t>(len(i))) ok = false;
    }
  }

  void uring(io_uring& ring, std::byte* buf) {
    unsigned inflight = 0, slot = 0;
    bool more = true;
    while ((more || inflight) && ok) {
      while (more && inflight < s.depth) {
        const uint64_t i = next.fetch_add(1);
        if (i >= count) {
          more = false;
          break;
        }
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        void* p = buf + (slot++ % s.depth) * s.io;
        if (s.write)
          io_uring_prep_write(sqe, fd, p, len(i), offset + i * s.io);
        else
          io_uring_prep_read(sqe, fd, p, len(i), offset + i * s.io);
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
  }
};

}  // namespace

RawMeasure raw_bandwidth(const std::string& path, uint64_t offset, uint64_t bytes, const RawSetting& s) {
  RawMeasure m;
  const int mode = s.write ? (s.method == RawSetting::kMmap ? O_RDWR : O_WRONLY) : O_RDONLY;
  Fd fd(s.method == RawSetting::kMmap ? -1 : ::open(path.c_str(), mode | O_DIRECT | O_CLOEXEC));
  if (!fd) fd = Fd(::open(path.c_str(), mode | O_CLOEXEC));  // tmpfs takes no O_DIRECT; mmap needs none
  if (!fd) return m;
  // Buffers, rings and the mapping are set up before the clock starts. What is written is
  // incompressible, like KV: a device that compresses (zram, some SSDs) or skips zero pages
  // must do its work.
  const unsigned slots = s.method == RawSetting::kUring ? s.depth : 1;
  std::vector<AlignedBuffer> bufs;
  std::vector<io_uring> rings(s.method == RawSetting::kUring ? s.threads : 0);
  auto release = [&] {
    for (auto& r : rings)
      if (r.ring_fd > 0) io_uring_queue_exit(&r);
  };
  for (unsigned t = 0; t < s.threads; ++t) {
    bufs.emplace_back(s.io * slots);
    if (s.write) {
      auto* w = reinterpret_cast<uint64_t*>(bufs.back().data());
      uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t{t} << 32);
      for (size_t i = 0; i < bufs.back().size() / 8; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
        w[i] = x;
      }
    }
    if (!rings.empty() && io_uring_queue_init(s.depth, &rings[t], 0) != 0) {
      rings[t].ring_fd = -1;
      release();
      return m;
    }
  }
  std::byte* mapped = nullptr;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)), lead = offset % page;
  if (s.method == RawSetting::kMmap) {
    // populated: page faults belong to the first touch of a file, not to its bandwidth
    void* p = ::mmap(nullptr, bytes + lead, s.write ? PROT_WRITE : PROT_READ, MAP_SHARED | MAP_POPULATE, fd.get(),
                     static_cast<off_t>(offset - lead));
    if (p == MAP_FAILED) return m;
    mapped = static_cast<std::byte*>(p) + lead;
  }
  std::atomic<uint64_t> next{0};
  std::atomic<bool> ok{true};
  RawIo io{s, fd.get(), mapped, offset, bytes, (bytes + s.io - 1) / s.io, next, ok};
  const double c0 = process_cpu_s(), t0 = now_s();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < s.threads; ++t)
    workers.emplace_back([&, t] { rings.empty() ? io.sync(bufs[t].data()) : io.uring(rings[t], bufs[t].data()); });
  for (auto& t : workers) t.join();
  if (s.write && mapped) ::msync(mapped - lead, bytes + lead, MS_SYNC);
  if (s.write) ::fdatasync(fd.get());
  const double t = now_s() - t0;
  m.cpu_s = process_cpu_s() - c0;
  if (mapped) ::munmap(mapped - lead, bytes + lead);
  release();
  m.gbps = ok && t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0;
  return m;
}

// Each setting is measured once on a sample of the range, sized so that one measurement takes
// about 0.1 s at the device's speed with the default settings (64 to 512 MiB), so the whole
// sweep takes seconds even on a slow disk: io_uring at 1 to 16 threads (a ring each) x 4, 16 or
// 64 in flight, and pread/pwrite at 1 to 16 threads, each at 256 KiB, 1 MiB and 4 MiB I/Os; on
// tmpfs also memcpy to or from the mapped file. A device is fastest at different settings: a
// virtio disk at few deep queues, zram at a thread per core (it decompresses in the submitting
// thread), tmpfs writes by memcpy (a write() to one file takes its inode lock, and io_uring
// queues buffered writes to one file behind each other).
RawSetting best_raw_setting(const std::string& path, uint64_t offset, uint64_t bytes, bool write) {
  constexpr uint64_t kMiB = 1 << 20;
  RawSetting best;
  best.write = write;
  const double first = raw_bandwidth(path, offset, std::min(bytes, 64 * kMiB), best).gbps;
  const uint64_t sample = std::min(bytes, std::clamp<uint64_t>(static_cast<uint64_t>(first * 1e8) / kMiB * kMiB,
                                                               64 * kMiB, 512 * kMiB));
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<RawSetting::Method> methods = {RawSetting::kUring, RawSetting::kSync};
  if (on_tmpfs(path)) methods.push_back(RawSetting::kMmap);
  double best_gbps = -1;
  for (auto method : methods)
    for (unsigned threads : {1u, 2u, 4u, 8u, 16u}) {
      if (threads > 2 * cores) break;
      for (unsigned depth : {4u, 16u, 64u}) {
        if (method != RawSetting::kUring && depth > 4) break;  // one depth: one I/O per thread
        for (uint64_t io : {256 * kMiB / 1024, kMiB, 4 * kMiB}) {
          const RawSetting s{method, write, threads, method == RawSetting::kUring ? depth : 1, io};
          if (uint64_t{s.threads} * s.depth * io > sample) continue;  // more in flight than there is to move
          const double g = raw_bandwidth(path, offset, sample, s).gbps;
          if (g > best_gbps) best_gbps = g, best = s;
        }
      }
    }
  return best;
}

H2dFigures h2d_bandwidth(uint64_t extent) {
  H2dFigures f;
  f.bytes = 512ull << 20;
  extent = std::max<uint64_t>(extent, 4096);
  for (uint64_t piece : {extent, uint64_t{16} << 20, f.bytes})
    for (unsigned streams : {1u, 2u, 4u}) {
      if (piece == f.bytes && streams > 1) continue;  // one copy: one stream
      const double gbps = gpu::h2d_gbps(0, f.bytes, piece, streams);
      const std::string at = "copy-" + size_label(piece) + "-" + std::to_string(streams) + "x";
      if (gbps > f.gbps) f.gbps = gbps, f.at = at;
      if (piece == extent && gbps > f.extents_gbps) f.extents_gbps = gbps, f.extents_at = at;
    }
  // Twice the pinned memory of the others: where that fails there is no rows figure; the
  // rest stands.
  const uint64_t rows = (uint64_t{16} << 20) / extent;
  for (unsigned streams : {1u, 2u}) {
    if (rows < 2) break;
    double gbps = 0;
    try {
      gbps = gpu::h2d_gbps(0, f.bytes / extent * extent, extent, streams, rows);
    } catch (const Error&) {
      break;
    }
    if (gbps > f.rows_gbps)
      f.rows_gbps = gbps, f.rows_at = "copy2d-" + std::to_string(rows) + "x" + size_label(extent) + "-" +
                                      std::to_string(streams) + "x";
  }
  return f;
}

}  // namespace tutti::cli
