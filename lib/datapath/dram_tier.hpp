// SPDX-License-Identifier: Apache-2.0
// A DRAM tier above the pool: host memory that keeps the most recently moved chunk-layer
// extents, so a load of a prefix that is still in memory is a memcpy, not an I/O. It sits in
// front of a CPU producer (uring, posix, passthru, nvme) as a backend of its own:
// - a load of a whole extent that the tier holds is copied by the tier's threads;
// - every other load goes to the pool, and the bytes it read are kept (read-allocate);
// - a store goes to the pool, and once written its bytes are kept (write-through), so the
//   tier never holds bytes the pool does not. A failed or partial store drops what the tier
//   held for that range.
// The tier is volatile: it starts empty and the pool stays the truth.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "datapath/backend.hpp"

namespace tutti {

class DramTier {
 public:
  // `capacity` bytes of extents of `extent_bytes` each (at least one).
  DramTier(uint64_t capacity, uint64_t extent_bytes);

  uint64_t extent_bytes() const noexcept { return extent_; }
  uint64_t capacity() const noexcept { return slots_.size() * extent_; }
  uint64_t hits() const noexcept { return hits_; }
  uint64_t misses() const noexcept { return misses_; }

  // A held extent for a whole-extent load: its slot, kept from eviction until release();
  // -1 if the tier does not hold it (a miss).
  int acquire(const IoOp& op);
  void copy_out(int slot, IoOp& op) const;  // the slot's bytes into the op's memory
  void release(int slot);
  // After an op moved a whole extent: keep its bytes, replacing older ones.
  void keep(const IoOp& op);
  // After a store that failed or was not a whole extent, or a load whose bytes failed their
  // checksum: forget what overlaps it.
  void drop(uint32_t file, uint64_t offset, uint64_t length);
  void drop(const IoOp& op) { drop(op.file, op.offset, op.length); }

 private:
  struct Slot {
    uint32_t file = 0;
    uint64_t offset = 0;
    unsigned readers = 0;
    bool listed = false;  // in where_ (and in lru_); an unlisted slot with readers is freed by the last
    std::list<int>::iterator lru;
  };
  using Key = std::pair<uint32_t, uint64_t>;

  int take_slot();  // a free or least recently used slot with no readers, or -1; under mu_
  void unlist(int slot);

  struct Unmap {
    size_t bytes;
    void operator()(std::byte* p) const;
  };

  const uint64_t extent_;
  std::unique_ptr<std::byte, Unmap> base_{nullptr, Unmap{0}};
  std::mutex mu_;
  std::vector<Slot> slots_;
  std::map<Key, int> where_;
  std::list<int> lru_;  // front: most recently used
  std::vector<int> free_;
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

// `inner` behind the tier; `threads` copy hits.
std::unique_ptr<Backend> make_tiered_backend(std::unique_ptr<Backend> inner, std::shared_ptr<DramTier> tier,
                                             unsigned threads);

}  // namespace tutti
