// SPDX-License-Identifier: Apache-2.0
// rw-probe: do a store's writes slow O_DIRECT reads of the same file more when they fill
// fallocated (unwritten) blocks than when they overwrite written ones? Readers loop over 1 GiB
// of written blocks with 1 MiB reads while one writer fills 1 GiB of the file.
//   g++ -O2 -o /tmp/rw-probe tools/rw-probe.cpp -lpthread
//   /tmp/rw-probe FILE setup                     (3 GiB: two written, one fallocated)
//   /tmp/rw-probe FILE none|over|fresh SECONDS READERS [WRITER_PAUSE_US]
// Prints the readers' GB/s and read latency percentiles, and the writer's GB/s.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kIo = 1 << 20, kRegion = 1ull << 30;

void* aligned_io_buffer() {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, kIo)) std::perror("posix_memalign"), std::exit(1);
  for (size_t i = 0; i < kIo / 4; ++i) static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(std::rand());  // incompressible
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: rw-probe FILE setup | FILE none|over|fresh SECONDS READERS [PAUSE_US]\n"), 2;
  const std::string mode = argv[2];
  const int fd = open(argv[1], O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd < 0) return std::perror(argv[1]), 1;
  void* buf = aligned_io_buffer();
  if (mode == "setup") {  // regions: 0 written (read), 1 written (overwritten), 2 fallocated (filled)
    if (ftruncate(fd, 0) || fallocate(fd, 0, 0, 3 * kRegion)) return std::perror("fallocate"), 1;
    for (size_t o = 0; o < 2 * kRegion; o += kIo)
      if (pwrite(fd, buf, kIo, static_cast<off_t>(o)) != static_cast<ssize_t>(kIo)) return std::perror("pwrite"), 1;
    return fsync(fd);
  }
  if (argc < 5) return std::fprintf(stderr, "rw-probe: SECONDS and READERS missing\n"), 2;
  const double secs = std::atof(argv[3]);
  const int readers = std::atoi(argv[4]), pause_us = argc > 5 ? std::atoi(argv[5]) : 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> read_bytes{0}, written{0};
  std::mutex mu;
  std::vector<double> lat_us;
  std::vector<std::thread> threads;
  for (int t = 0; t < readers; ++t)
    threads.emplace_back([&, t] {
      void* b = aligned_io_buffer();
      size_t o = (t * (kRegion / readers)) & ~(kIo - 1);
      std::vector<double> mine;
      while (!stop) {
        const auto t0 = std::chrono::steady_clock::now();
        if (pread(fd, b, kIo, static_cast<off_t>(o)) != static_cast<ssize_t>(kIo)) std::perror("pread"), std::exit(1);
        mine.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        read_bytes += kIo;
        o = (o + kIo) % kRegion;
      }
      std::lock_guard lock(mu);
      lat_us.insert(lat_us.end(), mine.begin(), mine.end());
      std::free(b);
    });
  if (mode == "over" || mode == "fresh")
    threads.emplace_back([&] {
      const size_t base = mode == "over" ? kRegion : 2 * kRegion;
      for (size_t o = 0; !stop && o < kRegion; o += kIo) {
        if (pwrite(fd, buf, kIo, static_cast<off_t>(base + o)) != static_cast<ssize_t>(kIo)) std::perror("pwrite"), std::exit(1);
        written += kIo;
        if (pause_us) usleep(static_cast<useconds_t>(pause_us));
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
  stop = true;
  for (auto& t : threads) t.join();
  std::sort(lat_us.begin(), lat_us.end());
  std::printf("%-6s read %.2f GB/s  write %.2f GB/s  read us p50 %.0f p99 %.0f max %.0f\n", mode.c_str(),
              read_bytes / secs / 1e9, written / secs / 1e9, lat_us[lat_us.size() / 2], lat_us[lat_us.size() * 99 / 100],
              lat_us.back());
  if (mode == "fresh")  // unwritten again, for the next trial
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * kRegion, kRegion) ||
        fallocate(fd, 0, 2 * kRegion, kRegion))
      std::perror("fallocate");
  std::free(buf);
  return 0;
}
