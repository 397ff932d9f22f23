// SPDX-License-Identifier: Apache-2.0
#include "nvme/queue.hpp"

#include <fcntl.h>
#include <nvme/types.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "kmod/uapi/tutti_kmod.h"

namespace tutti::nvme {

Lease::Lease(const std::string& dev) : fd_(::open(dev.c_str(), O_RDWR | O_CLOEXEC)) {
  if (!fd_) fail_errno(errno, "open " + dev + " (is tutti_kmod loaded, and are you root?)");
  tutti_version v{};
  v.size = sizeof v;
  if (::ioctl(fd_.get(), TUTTI_IOC_GET_VERSION, &v) != 0) fail_errno(errno, dev + ": GET_VERSION");
  if (v.abi < TUTTI_KMOD_ABI)
    fail(TUTTI_EUNSUPPORTED, dev + ": module ABI " + std::to_string(v.abi) + ", tutti needs " +
                                 std::to_string(TUTTI_KMOD_ABI) + " (load a newer tutti_kmod)");
}

ControllerInfo Lease::controller(uint32_t ctrl, uint32_t nsid) const {
  nvme_id_ctrl id{};
  nvme_id_ns ns{};
  tutti_ctrl_info req{};
  req.size = sizeof req;
  req.ctrl = ctrl;
  req.identify = reinterpret_cast<uintptr_t>(&id);
  req.identify_ns = reinterpret_cast<uintptr_t>(&ns);
  req.nsid = nsid;
  static_assert(sizeof id == 4096 && sizeof ns == 4096, "Identify data is 4 KiB");
  if (::ioctl(fd_.get(), TUTTI_IOC_CTRL_INFO, &req) != 0)
    fail_errno(errno, "tutti_kmod: controller " + std::to_string(ctrl) + ", namespace " + std::to_string(nsid));
  ControllerInfo c = identify_info(id, ns, ctrl, nsid);
  c.bdf = req.bdf;
  c.max_queues = req.max_queues;
  c.mqes = req.mqes;
  return c;
}

ControllerInfo identify_info(const nvme_id_ctrl& id, const nvme_id_ns& ns, uint32_t ctrl, uint32_t nsid) {
  ControllerInfo c;
  // MDTS counts minimum-size (4 KiB) pages, 0 = no limit (then 2 MiB, a PRP list page's worth).
  c.max_bytes = id.mdts ? (4096u << std::min<uint32_t>(id.mdts, 19)) : (2u << 20);
  const uint32_t sgls = id.sgls;  // SGLS bits 1:0: 01b any alignment, 10b dword aligned, 11b reserved
  c.sgl = (sgls & 3) == 1 || (sgls & 3) == 2;
  c.sgl_dword_aligned = (sgls & 3) == 2;
  const nvme_lbaf& f = ns.lbaf[ns.flbas & 0xf];
  if (f.ms)
    fail(TUTTI_EUNSUPPORTED, "tutti_kmod: namespace " + std::to_string(nsid) + " of controller " + std::to_string(ctrl) +
                                 " is formatted with " + std::to_string(f.ms) +
                                 " bytes of metadata per LBA, which the nvme backend does not move: use uring or posix "
                                 "there, or a format without metadata");
  if (f.ds < 9 || f.ds > 16)
    fail(TUTTI_EUNSUPPORTED, "tutti_kmod: namespace " + std::to_string(nsid) + " has LBAs of 2^" + std::to_string(f.ds) +
                                 " bytes; the nvme backend takes 512 B to 64 KiB");
  c.lba_bytes = 1u << f.ds;
  // NLB is 16 bits: a command moves at most 65536 LBAs, whatever MDTS allows.
  c.max_bytes = static_cast<uint32_t>(std::min<uint64_t>(c.max_bytes, uint64_t{65536} * c.lba_bytes));
  c.lbas = ns.nsze;
  if (!c.lbas)
    fail(TUTTI_EUNSUPPORTED, "tutti_kmod: namespace " + std::to_string(nsid) + " is not attached to controller " +
                                 std::to_string(ctrl));
  c.model.assign(id.mn, strnlen(id.mn, sizeof id.mn));
  c.subnqn.assign(id.subnqn, strnlen(id.subnqn, sizeof id.subnqn));
  while (!c.model.empty() && c.model.back() == ' ') c.model.pop_back();
  return c;
}

DmaMemory::DmaMemory(const Lease& lease, uint32_t ctrl, void* addr, size_t bytes) : lease_fd_(lease.fd()) {
  tutti_pin pin{};
  pin.size = sizeof pin;
  pin.addr = reinterpret_cast<uintptr_t>(addr);
  pin.length = bytes;
  if (::ioctl(lease_fd_, TUTTI_IOC_PIN, &pin) != 0) fail_errno(errno, "tutti_kmod: pin " + std::to_string(bytes) + " bytes");
  pin_ = pin.handle;
  pages_.resize(bytes / kPage);
  tutti_dma_map m{};
  m.size = sizeof m;
  m.ctrl = ctrl;
  m.dmabuf_fd = -1;
  m.pinned = pin_;
  m.iovas = reinterpret_cast<uintptr_t>(pages_.data());
  m.npages = pages_.size();
  if (::ioctl(lease_fd_, TUTTI_IOC_MAP_DMA, &m) != 0) {
    const int err = errno;
    ::ioctl(lease_fd_, TUTTI_IOC_UNPIN, &pin_);
    fail_errno(err, "tutti_kmod: DMA-map pinned memory");
  }
  map_ = m.handle;
}

DmaMemory::DmaMemory(const Lease& lease, uint32_t ctrl, int dmabuf_fd, size_t bytes) : lease_fd_(lease.fd()) {
  pages_.resize(bytes / kPage);
  tutti_dma_map m{};
  m.size = sizeof m;
  m.ctrl = ctrl;
  m.dmabuf_fd = dmabuf_fd;
  m.iovas = reinterpret_cast<uintptr_t>(pages_.data());
  m.npages = pages_.size();
  if (::ioctl(lease_fd_, TUTTI_IOC_MAP_DMA, &m) != 0) fail_errno(errno, "tutti_kmod: DMA-map a dma-buf");
  pages_.resize(m.npages);
  map_ = m.handle;
}

DmaMemory::~DmaMemory() {
  if (lease_fd_ < 0) return;  // not ours to unmap
  ::ioctl(lease_fd_, TUTTI_IOC_UNMAP_DMA, &map_);
  if (pin_) ::ioctl(lease_fd_, TUTTI_IOC_UNPIN, &pin_);
}

void DmaMemory::segments(size_t offset, size_t len, std::vector<Segment>& out) const {
  TUTTI_EXPECT(offset + len <= bytes() && len > 0, "DmaMemory: range outside the mapping");
  while (len) {
    const size_t in_page = std::min(len, kPage - offset % kPage);
    const uint64_t a = bus(offset);
    if (!out.empty() && out.back().addr + out.back().len == a && out.back().len + in_page <= UINT32_MAX)
      out.back().len += static_cast<uint32_t>(in_page);
    else
      out.push_back({a, static_cast<uint32_t>(in_page)});
    offset += in_page, len -= in_page;
  }
}

QueuePair::QueuePair(const Lease& lease, uint32_t ctrl, uint32_t depth) : lease_fd_(lease.fd()), depth_(depth) {
  tutti_qp q{};
  q.size = sizeof q;
  q.ctrl = ctrl;
  q.depth = depth;
  if (::ioctl(lease_fd_, TUTTI_IOC_CREATE_QP, &q) != 0)
    fail_errno(errno, "tutti_kmod: queue pair of depth " + std::to_string(depth) + " on controller " + std::to_string(ctrl));
  token_ = q.token;
  qid_ = static_cast<uint16_t>(q.qid);
  lists_bus_ = q.lists_dma;
  for (int r = 0; r < TUTTI_QP_REGIONS; ++r) {
    region_bytes_[r] = q.region_bytes[r];
    void* p = ::mmap(nullptr, region_bytes_[r], PROT_READ | PROT_WRITE, MAP_SHARED, lease_fd_,
                     static_cast<off_t>((token_ * TUTTI_QP_REGIONS + r) * 4096));
    if (p == MAP_FAILED) {
      const int err = errno;
      release();
      fail_errno(err, "tutti_kmod: map queue pair region " + std::to_string(r));
    }
    regions_[r] = p;
  }
  auto* db = static_cast<std::byte*>(regions_[TUTTI_QP_DOORBELLS]);
  sq_doorbell_ = reinterpret_cast<volatile uint32_t*>(db + q.sq_doorbell);
  cq_doorbell_ = reinterpret_cast<volatile uint32_t*>(db + q.cq_doorbell);
  lists_ = static_cast<std::byte*>(regions_[TUTTI_QP_LISTS]);
  for (uint32_t cid = depth - 1; cid-- > 0;) free_.push_back(static_cast<uint16_t>(cid));  // next_cid() = 0 first
}

QueuePair::~QueuePair() { release(); }

void QueuePair::release() noexcept {
  for (int r = 0; r < TUTTI_QP_REGIONS; ++r)
    if (regions_[r]) ::munmap(regions_[r], region_bytes_[r]), regions_[r] = nullptr;
  if (token_) ::ioctl(lease_fd_, TUTTI_IOC_DELETE_QP, &token_), token_ = 0;
}

uint16_t QueuePair::submit(Sqe cmd) {
  TUTTI_EXPECT(!free_.empty(), "QueuePair: no free command id (poll first)");
  const uint16_t cid = free_.back();
  free_.pop_back();
  cmd.cdw[0] = (cmd.cdw[0] & 0xffff) | (uint32_t{cid} << 16);
  std::memcpy(static_cast<std::byte*>(regions_[TUTTI_QP_SQ]) + size_t{sq_tail_} * 64, &cmd, 64);
  sq_tail_ = (sq_tail_ + 1) % depth_;
  // The entry before the doorbell. On x86-64 (the only target tutti packages) stores reach
  // memory in order and the doorbell is an uncached store; a weaker architecture would need
  // a barrier that orders memory against the device.
  std::atomic_thread_fence(std::memory_order_release);
  *sq_doorbell_ = sq_tail_;
  return cid;
}

uint32_t QueuePair::poll(const std::function<void(uint16_t, uint16_t)>& fn) {
  struct Cqe {
    uint32_t result, reserved;
    uint16_t sq_head, sq_id, cid, status;
  };
  auto* cq = static_cast<volatile Cqe*>(regions_[TUTTI_QP_CQ]);
  uint32_t n = 0;
  for (;;) {
    const uint16_t status = cq[cq_head_].status;
    if ((status & 1) != phase_) break;
    std::atomic_thread_fence(std::memory_order_acquire);  // the entry after its phase bit
    const uint16_t cid = cq[cq_head_].cid;
    if (++cq_head_ == depth_) cq_head_ = 0, phase_ ^= 1;
    free_.push_back(cid);
    fn(cid, static_cast<uint16_t>(status >> 1));
    ++n;
  }
  if (n) *cq_doorbell_ = cq_head_;
  return n;
}

}  // namespace tutti::nvme
