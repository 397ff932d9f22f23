// SPDX-License-Identifier: Apache-2.0
// gpu-uring: loads into CUDA memory whose I/O the GPU itself submits and reaps. This side sets
// up the io_uring rings (SQPOLL, so no system call is needed to submit; registered pool files
// and staging) and keeps their SQPOLL threads awake while layers are in flight; the GPU side
// is kernels/gpu_uring.hpp. Stores go through the CPU producer (uring): a commit record needs
// each layer's checksum, which the CPU computes as it writes.
#pragma once

#include <condition_variable>
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

  // One layer of a batch on `stream`; done(arg) runs on a CUDA thread once it is in the blocks.
  void load_layer(uint32_t stream, const gpu::LayerLoad& a, void (*done)(void*), void* arg);
  // The most chunks one layer may read.
  uint32_t max_chunks() const { return max_chunks_; }
  std::string describe() const;

 private:
  struct Landed;
  void wake_idle();  // IORING_ENTER_SQ_WAKEUP on rings whose SQPOLL thread sleeps
  void run_waker();

  std::vector<std::unique_ptr<io_uring>> rings_;
  std::unique_ptr<gpu::UringDriver> driver_;
  uint32_t max_chunks_ = 0;
  unsigned idle_ms_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  unsigned in_flight_ = 0;  // layers launched and not yet landed
  bool stop_ = false;
  std::thread waker_;
};

}  // namespace tutti
