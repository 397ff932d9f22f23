// SPDX-License-Identifier: Apache-2.0
// dram: the pool kept in memory. Its files live on tmpfs (/dev/shm), so they outlive the process
// but not a reboot, and are mapped into the process. With a KV cache in host memory the
// backend's I/Os are memcpys from worker threads; with a KV cache in CUDA memory the mapping is
// pinned for the GPU and the copy kernels move bytes straight between it and the blocks: no
// I/O and no staging, one kernel per layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "datapath/backend.hpp"
#include "kernels/device.hpp"
#include "pool/pool.hpp"

namespace tutti {

class DramPool {
 public:
  // Maps every pool file (throws EUNSUPPORTED unless all are on tmpfs or ramfs); pins the
  // mappings for `dev` when given.
  DramPool(const Pool& pool, gpu::Device* dev);
  ~DramPool();
  DramPool(const DramPool&) = delete;
  DramPool& operator=(const DramPool&) = delete;

  std::byte* host(uint32_t file, uint64_t offset) const { return maps_[file].host + offset; }
  uint64_t device(uint32_t file, uint64_t offset) const { return maps_[file].pin.device_address() + offset; }
  size_t files() const { return maps_.size(); }

 private:
  struct Map {
    std::byte* host = nullptr;
    size_t bytes = 0;
    gpu::HostPin pin;  // with CUDA memory
  };
  void unmap();

  std::vector<Map> maps_;
};

// Runs fn(arg), which touches the mapped pool, and returns true; or returns false if it touched a
// page that is gone because another process truncated a pool file. Such a touch raises SIGBUS;
// a handler (installed on first use, handing every other SIGBUS to the one it replaced) jumps
// back here instead of killing the process. fn must only read and write memory: it is left
// midway, so it may hold no lock, allocate nothing and own nothing with a destructor.
bool touch_mapped(void (*fn)(void*), void* arg);

template <class F>
bool touch_mapped(F&& f) {
  return touch_mapped([](void* p) { (*static_cast<F*>(p))(); }, &f);
}

// The host-memory side: a pool of threads copying between the mapping and the ops' memory.
std::unique_ptr<Backend> make_dram_backend(const BackendConfig& cfg, const DramPool& pool);

}  // namespace tutti
