// SPDX-License-Identifier: Apache-2.0
// Staging: a fixed budget of aligned host memory cut into equal buffers, handed out one per
// in-flight I/O. Running out blocks the issuer, which is how the staging budget bounds how far
// ahead of the consumer reads may run. Loads and stores have one each (reads before writes: a
// load never waits for buffers that a store's writes hold).
#pragma once

#include <sys/uio.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/fd.hpp"

namespace tutti {

class Staging {
 public:
  struct Buffer {
    std::byte* data = nullptr;
    int region = -1;  // index of the registered region that holds it
    uint32_t id = 0;
  };

  Staging() = default;
  // `budget` bytes in buffers of `buffer_bytes` (at least one buffer), in host memory of its
  // own, or in `device` memory of arena_bytes_for(budget, buffer_bytes) that the caller owns
  // (buffers then hold device pointers, never touched by the CPU).
  Staging(uint64_t budget, uint64_t buffer_bytes, std::byte* device = nullptr);
  static uint64_t arena_bytes_for(uint64_t budget, uint64_t buffer_bytes);

  Buffer acquire();  // blocks until a buffer is free
  // Blocks until `k` (at most count()) are free, and takes them at once: two takers of several
  // never each hold part of what the other waits for.
  std::vector<Buffer> acquire_n(size_t k);
  bool try_acquire(Buffer* out);
  void release(const Buffer& b);

  uint64_t buffer_bytes() const { return buffer_bytes_; }
  size_t count() const { return count_; }
  // Regions to register with io_uring (each at most 1 GiB, whole buffers).
  const std::vector<iovec>& regions() const { return regions_; }
  // The whole arena, and where a GPU sees a buffer once the arena is pinned and mapped.
  std::byte* arena() const { return base_; }
  uint64_t arena_bytes() const { return count_ * buffer_bytes_; }
  void set_device_base(uint64_t base) { device_base_ = base; }
  uint64_t device_address(const Buffer& b) const { return device_base_ + uint64_t(b.data - base_); }
  bool in_device_memory() const { return in_device_; }

 private:
  Buffer take();  // requires mu_ and a free buffer

  AlignedBuffer arena_;  // host memory, unless the arena is device memory
  std::byte* base_ = nullptr;
  uint64_t buffer_bytes_ = 0;
  size_t count_ = 0;
  size_t per_region_ = 1;
  uint64_t device_base_ = 0;
  bool in_device_ = false;
  std::vector<iovec> regions_;
  std::mutex mu_;
  std::condition_variable cv_;
  unsigned bulk_waiters_ = 0;  // acquire_n callers asleep; under mu_
  std::vector<uint32_t> free_;
};

}  // namespace tutti
