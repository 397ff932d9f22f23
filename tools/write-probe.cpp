// SPDX-License-Identifier: Apache-2.0
// write-probe: what caps O_DIRECT writes into a RAM-backed device (zram, the stand-in for an
// NVMe array)? First the first touch of anonymous memory by 1 to 16 threads, twice, each a
// fresh mapping (in a virtual machine a guest page's first touch may cost the host a fault;
// the second mapping likely gets the pages the first gave back). Then incompressible 1 MiB
// writes by 1 to 16 threads, each count into blocks the device holds nothing for, then into
// the same blocks again. TARGET is a directory (a file in it, fallocated: mind the file system's
// own first-write work, and trim it first) or a block device (written from offset 0: all its
// contents are lost).
//   g++ -O2 -o /tmp/write-probe tools/write-probe.cpp -lpthread
//   /tmp/write-probe TARGET [GIB_PER_TRIAL]      (default 2; needs 5 x GIB free in TARGET)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kIo = 1 << 20, kPage = 4096;
constexpr unsigned kCounts[] = {1, 2, 4, 8, 16};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `threads` writers over [base, base + bytes) of fd, interleaved by kIo (bytes: a multiple of
// kIo); GB/s.
double write_pass(int fd, size_t base, size_t bytes, unsigned threads) {
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      void* buf = nullptr;
      if (posix_memalign(&buf, kPage, kIo)) std::perror("posix_memalign"), std::exit(1);
      std::mt19937_64 rng(t + 1);
      for (size_t i = 0; i < kIo / 8; ++i) static_cast<uint64_t*>(buf)[i] = rng();  // incompressible
      for (size_t o = t * kIo; o < bytes; o += threads * kIo)
        if (pwrite(fd, buf, kIo, static_cast<off_t>(base + o)) != static_cast<ssize_t>(kIo))
          std::perror("pwrite"), std::exit(1);
      std::free(buf);
    });
  for (auto& t : ts) t.join();
  return static_cast<double>(bytes) / seconds_since(t0) / 1e9;
}

// `threads` threads write one byte into every 4 KiB page of a fresh anonymous mapping of
// `bytes` (a multiple of threads x 4 KiB; no huge pages: one fault per page); GB/s.
double touch_pass(size_t bytes, unsigned threads) {
  auto* p = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) std::perror("mmap"), std::exit(1);
  madvise(p, bytes, MADV_NOHUGEPAGE);
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t share = bytes / threads;
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      for (size_t o = t * share; o < (t + 1) * share; o += kPage) p[o] = 1;
    });
  for (auto& t : ts) t.join();
  const double gbps = static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  munmap(p, bytes);
  return gbps;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: write-probe DIR|BLOCK_DEVICE [GIB_PER_TRIAL]\n"), 2;
  const size_t trial = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2) << 30;
  struct stat st {};
  if (stat(argv[1], &st)) return std::perror(argv[1]), 1;
  const bool device = S_ISBLK(st.st_mode);
  const std::string path = device ? argv[1] : std::string(argv[1]) + "/write-probe.data";

  std::printf("%-8s %-24s %-24s\n", "threads", "touch, mapping 1 GB/s", "touch, mapping 2 GB/s");
  for (unsigned t : kCounts) {
    const double first = touch_pass(trial, t), second = touch_pass(trial, t);
    std::printf("%-8u %-24.2f %-24.2f\n", t, first, second);
  }

  const int fd = open(path.c_str(), device ? O_RDWR | O_DIRECT : O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) return std::perror(path.c_str()), 1;
  if (!device && fallocate(fd, 0, 0, static_cast<off_t>(std::size(kCounts) * trial))) return std::perror("fallocate"), 1;
  std::printf("%s%s\n%-8s %-22s %-22s\n", device ? "block device " : "fallocated file ", path.c_str(), "threads",
              "write new GB/s", "write again GB/s");
  for (size_t i = 0; i < std::size(kCounts); ++i) {
    const unsigned t = kCounts[i];
    const double fresh = write_pass(fd, i * trial, trial, t);
    const double again = write_pass(fd, i * trial, trial, t);
    std::printf("%-8u %-22.2f %-22.2f\n", t, fresh, again);
  }
  close(fd);
  if (!device) unlink(path.c_str());
  return 0;
}
