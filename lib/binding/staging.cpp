// SPDX-License-Identifier: Apache-2.0
#include "binding/staging.hpp"

#include <algorithm>

#include "common/units.hpp"

namespace tutti {

uint64_t Staging::arena_bytes_for(uint64_t budget, uint64_t buffer_bytes) {
  const uint64_t b = align_up(buffer_bytes, 4096);
  return std::max<uint64_t>(1, budget / b) * b;
}

Staging::Staging(uint64_t budget, uint64_t buffer_bytes, std::byte* device)
    : buffer_bytes_(align_up(buffer_bytes, 4096)) {
  count_ = std::max<uint64_t>(1, budget / buffer_bytes_);
  if (device) {
    base_ = device;
    device_base_ = reinterpret_cast<uint64_t>(device);
    in_device_ = true;
  } else {
    arena_ = AlignedBuffer(count_ * buffer_bytes_);
    base_ = arena_.data();
  }
  per_region_ = std::max<uint64_t>(1, (1ull << 30) / buffer_bytes_);
  for (size_t first = 0; first < count_; first += per_region_) {
    size_t n = std::min(per_region_, count_ - first);
    regions_.push_back(iovec{base_ + first * buffer_bytes_, n * buffer_bytes_});
  }
  free_.reserve(count_);
  for (size_t i = count_; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
}

Staging::Buffer Staging::acquire() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  return take();
}

std::vector<Staging::Buffer> Staging::acquire_n(size_t k) {
  k = std::min(k, count_);
  std::vector<Buffer> out;
  out.reserve(k);
  std::unique_lock lock(mu_);
  ++bulk_waiters_;
  cv_.wait(lock, [&] { return free_.size() >= k; });
  --bulk_waiters_;
  while (out.size() < k) out.push_back(take());
  return out;
}

bool Staging::try_acquire(Buffer* out) {
  std::lock_guard lock(mu_);
  if (free_.empty()) return false;
  *out = take();
  return true;
}

Staging::Buffer Staging::take() {
  const uint32_t id = free_.back();
  free_.pop_back();
  return Buffer{base_ + uint64_t{id} * buffer_bytes_, static_cast<int>(id / per_region_), id};
}

void Staging::release(const Buffer& b) {
  bool bulk;
  {
    std::lock_guard lock(mu_);
    free_.push_back(b.id);
    bulk = bulk_waiters_ > 0;
  }
  // One buffer wakes one waiter, unless a taker of several waits: the one woken might be it,
  // still short, and the buffer would wait with a waiter of one asleep.
  if (bulk)
    cv_.notify_all();
  else
    cv_.notify_one();
}

}  // namespace tutti
