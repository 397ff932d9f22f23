// SPDX-License-Identifier: Apache-2.0
// write-probe: what caps O_DIRECT writes into a RAM-backed device (ext4 on zram), the stand-in
// for an NVMe array? Incompressible 1 MiB writes by 1 to 16 threads, each count into blocks
// the device never held (fallocated, so the file system allocates nothing while writing), then
// into the same blocks again; and, apart from any device, the first and second touch of
// anonymous memory by as many threads (in a virtual machine the first touch of a guest page
// may cost the host a fault, and zram takes fresh pages for blocks it never held).
//   g++ -O2 -o /tmp/write-probe tools/write-probe.cpp -lpthread
//   /tmp/write-probe DIR [GIB_PER_TRIAL]      (default 2; needs 5 x GIB free in DIR)
#include <fcntl.h>
#include <sys/mman.h>
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

constexpr size_t kIo = 1 << 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `threads` writers over [base, base + bytes) of fd, interleaved by kIo; GB/s.
double write_pass(int fd, size_t base, size_t bytes, unsigned threads) {
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      void* buf = nullptr;
      if (posix_memalign(&buf, 4096, kIo)) std::perror("posix_memalign"), std::exit(1);
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

// `threads` threads write one byte into every page of `bytes` of fresh anonymous memory; GB/s.
double touch_pass(size_t bytes, unsigned threads) {
  auto* p = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) std::perror("mmap"), std::exit(1);
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t share = bytes / threads;
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      for (size_t o = t * share; o < (t + 1) * share; o += 4096) p[o] = 1;
    });
  for (auto& t : ts) t.join();
  const double gbps = static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  munmap(p, bytes);
  return gbps;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: write-probe DIR [GIB_PER_TRIAL]\n"), 2;
  const size_t trial = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2) << 30;
  const std::string path = std::string(argv[1]) + "/write-probe.data";
  const unsigned counts[] = {1, 2, 4, 8, 16};
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) return std::perror(path.c_str()), 1;
  if (fallocate(fd, 0, 0, static_cast<off_t>(std::size(counts) * trial))) return std::perror("fallocate"), 1;
  std::printf("%-8s %-22s %-22s %-18s %-18s\n", "threads", "write new GB/s", "write again GB/s", "touch new GB/s",
              "touch again GB/s");
  for (size_t i = 0; i < std::size(counts); ++i) {
    const unsigned t = counts[i];
    const double fresh = write_pass(fd, i * trial, trial, t);
    const double again = write_pass(fd, i * trial, trial, t);
    const double touch = touch_pass(trial, t), touch_again = touch_pass(trial, t);
    std::printf("%-8u %-22.2f %-22.2f %-18.2f %-18.2f\n", t, fresh, again, touch, touch_again);
  }
  close(fd);
  unlink(path.c_str());
  return 0;
}
