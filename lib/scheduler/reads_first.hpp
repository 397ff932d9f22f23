// ReadsFirst: the scheduler holds stores back while a load is in flight, but a store layer
// already handed to the I/O threads is a hundred or more writes, and on a device that spends
// CPU per write (zram, software RAID, encryption) they slowed the load that arrived meanwhile.
// So the store I/O threads also ask here before each write: while loads are in flight, a write
// waits, for at most max_wait (option store_yield_ms) per write, so that writes are never
// starved (a load that never lands, a runtime closing).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace tutti {

class ReadsFirst {
 public:
  void set_max_wait(std::chrono::milliseconds d) {
    std::lock_guard lock(mu_);
    max_wait_ = d;
  }
  void load_began() {
    std::lock_guard lock(mu_);
    ++loads_;
  }
  void load_landed() {
    std::lock_guard lock(mu_);
    if (--loads_ == 0) cv_.notify_all();
  }
  // Before a write: returns once no load is in flight, or after max_wait.
  void before_write() {
    std::unique_lock lock(mu_);
    if (max_wait_.count()) cv_.wait_for(lock, max_wait_, [&] { return loads_ == 0; });
  }
  size_t loads_in_flight() {
    std::lock_guard lock(mu_);
    return loads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t loads_ = 0;
  std::chrono::milliseconds max_wait_{0};  // 0: writes do not wait
};

}  // namespace tutti
