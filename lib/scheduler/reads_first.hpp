// SPDX-License-Identifier: Apache-2.0
// ReadsFirst: the scheduler holds a store's next layers back while a load is in flight, but the
// layer it is issuing when the load arrives is a hundred or more writes that would share the
// device (and, on zram or software RAID, the CPU) with the load. With option store_yield_ms the
// issuer asks here before each write it has not staged yet: while loads are in flight it hands
// over what it staged (those writes go on at once) and waits, for at most max_wait per write,
// so that writes are never starved (a load that never lands, a runtime closing).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace tutti {

class ReadsFirst {
 public:
  void set_max_wait(std::chrono::milliseconds d) { max_wait_ms_.store(d.count(), std::memory_order_relaxed); }
  void load_began() {
    std::lock_guard lock(mu_);
    loads_.fetch_add(1, std::memory_order_relaxed);
  }
  void load_landed() {
    std::lock_guard lock(mu_);
    if (loads_.fetch_sub(1, std::memory_order_relaxed) == 1) cv_.notify_all();
  }
  // Whether a write should yield now (no lock: asked before every write of a store).
  bool yielding() const { return max_wait_ms_.load(std::memory_order_relaxed) && loads_in_flight(); }
  // Before a write: returns once no load is in flight, or after max_wait.
  void before_write() {
    const std::chrono::milliseconds bound(max_wait_ms_.load(std::memory_order_relaxed));
    std::unique_lock lock(mu_);
    if (bound.count()) cv_.wait_for(lock, bound, [&] { return loads_in_flight() == 0; });
  }
  size_t loads_in_flight() const { return loads_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<size_t> loads_{0};
  std::atomic<int64_t> max_wait_ms_{0};  // the bound; 0: writes do not wait
};

}  // namespace tutti
