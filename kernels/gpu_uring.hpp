// SPDX-License-Identifier: Apache-2.0
// The GPU side of the gpu-uring backend, behind a CUDA-free interface. GPU warps write a layer's
// read SQEs into io_uring rings that live in host memory mapped for the device; the rings'
// SQPOLL kernel threads submit them; the warps poll the completion queues (or the host reaps
// them); a host callback then hands the layer on, and its copies into the paged blocks are
// queued like any load's (Device::scatter). The CPU builds no I/O: per layer it launches one read kernel and queues
// the copies once the reads are over.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/copy_layout.hpp"  // TUTTI_HOST_DEVICE
#include "kernels/device.hpp"

namespace tutti::gpu {

// A layer's reads as the kernel that submits them and whoever reaps them both see them: chunk
// i goes to ring i % rings, and its completion carries user_data = stream << 32 | i.
TUTTI_HOST_DEVICE inline uint32_t chunks_on_ring(uint32_t chunks, uint32_t ring, uint32_t rings) {
  return chunks > ring ? (chunks - ring + rings - 1) / rings : 0;
}
// A read's status from its completion: 0, or -errno. A short read is an error: O_DIRECT extents
// inside the pool file are never short.
TUTTI_HOST_DEVICE inline int32_t read_status(int32_t res, int32_t expect) {
  return res == expect ? 0 : res < 0 ? res : -EIO;
}

// One io_uring as liburing mapped it into this process (host addresses).
struct RingView {
  void* sq_ring = nullptr;  // SQ ring mmap (head, tail, flags, array)
  size_t sq_ring_bytes = 0;
  void* cq_ring = nullptr;  // CQ ring mmap; may be the SQ ring's (IORING_FEAT_SINGLE_MMAP)
  size_t cq_ring_bytes = 0;
  void* sqes = nullptr;
  size_t sqes_bytes = 0;
  uint32_t *sq_head = nullptr, *sq_tail = nullptr, *sq_flags = nullptr;
  uint32_t sq_mask = 0, sq_entries = 0;
  uint32_t *cq_head = nullptr, *cq_tail = nullptr;
  uint32_t cq_mask = 0, cq_entries = 0;
  void* cqes = nullptr;
};

// Where a chunk's layer-0 extent lies; layer l's is `layer_bytes * l` further on.
struct IoChunk {
  uint64_t offset0 = 0;
  uint32_t file = 0;      // registered-file index
  uint32_t async = 0;     // 1: its bytes are CPU copies (tmpfs, zram): read by io_uring's workers
};

// Where one chunk-layer read lands: a staging buffer, as user space and the device see it.
struct IoTarget {
  uint64_t host = 0;
  uint32_t buf_index = 0;  // registered buffer that holds it
  uint32_t pad = 0;
};

// The reads of one layer of one batch. Every array is device-visible (pinned with
// Device::host_alloc). `status` receives 0 or -errno per chunk.
struct LayerLoad {
  uint32_t layer = 0, n = 0;
  uint64_t layer_bytes = 0;
  uint64_t chunks = 0;   // IoChunk[n]
  uint64_t targets = 0;  // IoTarget[n]
  uint64_t status = 0;   // int32_t[n]
};

class UringDriver {
 public:
  static constexpr uint32_t kMaxRings = 8, kMaxStreams = 8;
  // Maps the rings' memory for the device (throws EUNSUPPORTED with the reason when it cannot).
  // poll_cqs: the read kernels poll the completion queues; otherwise they end once their SQEs
  // are published, and the host reaps every completion (the device never touches a CQ).
  UringDriver(Device& dev, const std::vector<RingView>& rings, bool poll_cqs = true);
  ~UringDriver();
  UringDriver(const UringDriver&) = delete;
  UringDriver& operator=(const UringDriver&) = delete;

  // Reads one layer into its staging on stream `stream` (< kMaxStreams), then read(arg) runs
  // on a CUDA thread: the reads are over, `status` final (without poll_cqs: the reads are
  // submitted; the host reaps them and writes `status`). The reads wait on the GPU for the
  // newest record of freed(stream), which whoever copies a stream's layer out of its staging
  // records after the copies (and anything that reads `status`): record it before the
  // stream's next read_layer. Called from one thread at a time. Where it throws, *submitted
  // says whether the layer's reads were submitted all the same (their completions will come).
  void read_layer(uint32_t stream, const LayerLoad& a, void (*read)(void*), void* arg, bool* submitted = nullptr);
  void* freed(uint32_t stream) const { return freed_[stream]; }
  // The most reads one layer may put on a ring, so no completion queue can overflow.
  uint32_t max_per_ring() const;
  size_t rings() const { return rings_.size(); }

 private:
  Device& dev_;
  std::vector<RingView> rings_;
  std::vector<void*> registered_;
  void* state_ = nullptr;  // device memory: locks, SQ tickets, completion counters
  uint64_t launched_[kMaxStreams] = {};
  bool poll_cqs_ = true;
  bool broken_ = false;  // a launch failed: the counters may be ahead of the rings
  void* streams_[kMaxStreams] = {};
  void* freed_[kMaxStreams] = {};  // per stream: its staging is free for the next reads
  uint64_t views_ = 0;     // device copy of the rings' device-side pointers
};

}  // namespace tutti::gpu
