// SPDX-License-Identifier: Apache-2.0
// User-driven NVMe queues on a controller dedicated to tutti (kmod/): a lease on /dev/tutti,
// memory pinned and DMA-mapped for the controller, and polled I/O queue pairs whose entries and
// doorbells this process writes itself. The commands come from kernels/nvme_cmd.hpp, the same
// source the GPU producer compiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "kernels/nvme_cmd.hpp"

struct nvme_id_ctrl;  // libnvme's <nvme/types.h>
struct nvme_id_ns;

namespace tutti::nvme {

// What Identify says about a controller and one of its namespaces.
struct ControllerInfo {
  std::string bdf;
  std::string subnqn;       // the NVM subsystem: NSIDs name the same namespace on all its controllers
  uint32_t max_queues = 0;  // I/O queue pairs granted
  uint32_t mqes = 0;        // deepest queue
  uint32_t max_bytes = 0;   // MDTS: the most one command moves
  bool sgl = false;         // SGLs for NVM commands
  bool sgl_dword_aligned = false;
  uint32_t lba_bytes = 0;
  uint64_t lbas = 0;        // namespace size
  std::string model;
};

// ControllerInfo from Identify Controller and Identify Namespace (libnvme's types). Throws
// TUTTI_EUNSUPPORTED for a namespace tutti cannot move data of: not attached, or formatted with
// metadata per LBA (protection information, separate or extended), whose reads would want a
// metadata buffer tutti does not give.
ControllerInfo identify_info(const ::nvme_id_ctrl& id, const ::nvme_id_ns& ns, uint32_t ctrl, uint32_t nsid);

// One open of /dev/tutti. Everything made through it is released with it, also by the kernel
// if the process dies.
class Lease {
 public:
  explicit Lease(const std::string& dev = "/dev/tutti");
  int fd() const noexcept { return fd_.get(); }
  ControllerInfo controller(uint32_t ctrl, uint32_t nsid = 1) const;

 private:
  Fd fd_;
};

// Host memory pinned and DMA-mapped for one controller: bus address of each byte.
class DmaMemory {
 public:
  // `addr` and `bytes` page aligned; the memory must outlive this object.
  DmaMemory(const Lease& lease, uint32_t ctrl, void* addr, size_t bytes);
  // A dma-buf (on real hardware, GPU memory exported by its driver).
  DmaMemory(const Lease& lease, uint32_t ctrl, int dmabuf_fd, size_t bytes);
  // Memory whose pages someone else mapped: the bus address of each page (command planning
  // without a controller, as the unit tests do).
  explicit DmaMemory(std::vector<uint64_t> bus_pages) : lease_fd_(-1), pages_(std::move(bus_pages)) {}
  ~DmaMemory();
  DmaMemory(const DmaMemory&) = delete;
  DmaMemory& operator=(const DmaMemory&) = delete;

  uint64_t bus(size_t offset) const { return pages_[offset / kPage] + offset % kPage; }
  size_t bytes() const noexcept { return pages_.size() * kPage; }
  // The runs of bus addresses behind [offset, offset + len): pages that are contiguous on the
  // bus (always, behind an IOMMU) merge into one segment.
  void segments(size_t offset, size_t len, std::vector<Segment>& out) const;

  static constexpr size_t kPage = 4096;

 private:
  int lease_fd_;
  uint64_t pin_ = 0, map_ = 0;
  std::vector<uint64_t> pages_;
};

// A polled I/O queue pair. Not thread safe: one submitter.
class QueuePair {
 public:
  QueuePair(const Lease& lease, uint32_t ctrl, uint32_t depth);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  uint16_t qid() const noexcept { return qid_; }
  uint32_t depth() const noexcept { return depth_; }
  // Free command ids (a full SQ holds depth - 1 entries).
  uint32_t room() const noexcept { return static_cast<uint32_t>(free_.size()); }

  // The command id the next submit() will use, with its list page (PRP list or SGL segment),
  // so the caller can build the data pointer there first.
  uint16_t next_cid() const { return free_.back(); }
  void* list(uint16_t cid) const { return lists_ + size_t{cid} * 4096; }
  uint64_t list_bus(uint16_t cid) const { return lists_bus_ + uint64_t{cid} * 4096; }

  // Copies the command (its cid set to next_cid()) into the SQ and rings the doorbell.
  uint16_t submit(Sqe cmd);
  // Reaps completions: fn(cid, status) for each (status 0 = success). Returns how many.
  uint32_t poll(const std::function<void(uint16_t cid, uint16_t status)>& fn);

 private:
  void release() noexcept;

  int lease_fd_;
  uint64_t token_ = 0;
  uint16_t qid_ = 0;
  uint32_t depth_ = 0;
  uint32_t region_bytes_[4] = {};
  void* regions_[4] = {};
  std::byte* lists_ = nullptr;
  uint64_t lists_bus_ = 0;
  volatile uint32_t* sq_doorbell_ = nullptr;
  volatile uint32_t* cq_doorbell_ = nullptr;
  uint32_t sq_tail_ = 0, cq_head_ = 0;
  uint16_t phase_ = 1;
  std::vector<uint16_t> free_;
};

}  // namespace tutti::nvme
