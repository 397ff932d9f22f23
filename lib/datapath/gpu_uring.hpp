// SPDX-License-Identifier: Apache-2.0
// gpu-uring: loads into CUDA memory whose I/O the GPU itself submits, and reaps unless
// gpu_uring_completions=cpu. This side sets up the io_uring rings (SQPOLL, so no system call is
// needed to submit; registered pool files and staging), keeps their SQPOLL threads awake while
// layers are in flight, and hands each layer whose read kernel has run to the copier thread,
// which (reaping its completions first when the host reaps) queues its copies; the GPU side is
// kernels/gpu_uring.hpp. Stores go through the CPU producer (uring): a commit record needs
// each layer's checksum, which the CPU computes as it writes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "datapath/backend.hpp"
#include "kernels/gpu_uring.hpp"

struct io_uring;

namespace tutti {

// "" when gpu-uring can work with this build and kernel (SQPOLL rings), else why not.
std::string gpu_uring_unavailable_reason();

class GpuUring {
 public:
  GpuUring(gpu::Device& dev, const BackendConfig& cfg);
  ~GpuUring();  // waits for every layer in flight
  GpuUring(const GpuUring&) = delete;
  GpuUring& operator=(const GpuUring&) = delete;

  // The reads of one layer of a batch, on driver stream `stream`; once they are over, copy(arg)
  // runs on the copier thread of this runtime's gpu-uring, to queue the layer's copies into the
  // blocks (recording freed(stream) after them) as the CPU paths queue theirs once their reads
  // are over: a stream-ordered wait then waits for copies, never for a read. The stream's next
  // reads wait for freed(stream) on the GPU; this call waits first until the stream's previous
  // layer has been through copy(), so that the newest record of freed(stream) follows its
  // copies. `status` is a.status as the CPU sees it (written here when the host reaps). Where
  // it throws after the reads were submitted, it returns once the copier has reaped them.
  void load_layer(uint32_t stream, const gpu::LayerLoad& a, int32_t* status, void (*copy)(void*), void* arg);
  void* freed(uint32_t stream) const { return driver_->freed(stream); }
  // The most chunks one layer may read.
  uint32_t max_chunks() const { return max_chunks_; }
  std::string describe() const;

 private:
  struct Read;
  // With gpu_uring_completions=cpu: what each stream's layer in flight still awaits, per ring.
  struct Reaping {
    int32_t* status = nullptr;
    int32_t expect = 0;  // a whole chunk-layer
    uint32_t n = 0;      // chunks
    uint32_t left[gpu::UringDriver::kMaxRings] = {};
  };
  void reap(uint32_t stream);  // on the copier: until every read of the stream's layer is in
  void wake_idle();  // IORING_ENTER_SQ_WAKEUP on rings whose SQPOLL thread sleeps
  void run_waker();
  void run_copier();

  std::vector<std::unique_ptr<io_uring>> rings_;
  std::unique_ptr<gpu::UringDriver> driver_;
  uint32_t max_chunks_ = 0;
  unsigned idle_ms_ = 0;
  bool host_reaps_ = false;  // option gpu_uring_completions=cpu
  Reaping reaping_[gpu::UringDriver::kMaxStreams];  // under mu_
  std::atomic<bool> poll_warned_{false};
  std::mutex mu_;
  std::condition_variable cv_;         // in_flight_, copied_, stop_
  std::condition_variable read_cv_;    // reads_, stop_
  unsigned in_flight_ = 0;             // layers launched and not yet through copy()
  uint64_t issued_[gpu::UringDriver::kMaxStreams] = {}, copied_[gpu::UringDriver::kMaxStreams] = {};
  std::deque<Read*> reads_;            // layers whose read kernel has run, in the order they ran
  bool stop_ = false;
  std::thread waker_, copier_;
};

}  // namespace tutti
