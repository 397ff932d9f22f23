// SPDX-License-Identifier: Apache-2.0
#include "nvme/nvme_backend.hpp"

#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>

#include "common/error.hpp"
#include "nvme/extents.hpp"
#include "nvme/io.hpp"
#include "nvme/namespace.hpp"
#include "nvme/queue.hpp"

namespace tutti {
namespace {

constexpr uintptr_t kPage = 4096, kWindow = 2 << 20;

// What the worker threads share: the lease, the controller, and the memory mapped for it.
struct Shared {
  nvme::Lease lease;
  uint32_t ctrl = 0, depth = 0;
  nvme::DataPointer dp = nvme::DataPointer::kSgl;
  std::vector<int> fds;
  std::vector<nvme::Namespace> spaces;
  std::vector<nvme::ControllerInfo> info;  // per pool file: the controller's view of its namespace

  std::mutex mu;
  std::map<uintptr_t, std::unique_ptr<nvme::DmaMemory>> mapped;  // by end address

  // Queue pairs, made as workers need them, as many as the controller grants (other
  // processes may hold some): a worker takes one for an I/O and gives it back.
  std::mutex qmu;
  std::condition_variable qcv;
  std::vector<std::unique_ptr<nvme::QueuePair>> idle;
  unsigned made = 0;
  bool no_more = false;  // the controller granted no more

  std::unique_ptr<nvme::QueuePair> take_queue() {
    std::unique_lock lock(qmu);
    for (;;) {
      if (!idle.empty()) {
        auto q = std::move(idle.back());
        idle.pop_back();
        return q;
      }
      if (!no_more) {
        ++made;
        lock.unlock();
        try {
          return std::make_unique<nvme::QueuePair>(lease, ctrl, depth);
        } catch (const Error&) {
          lock.lock();
          --made;
          no_more = true;
          if (made == 0) throw;  // not even one
          continue;
        }
      }
      qcv.wait(lock);
    }
  }
  void give_back(std::unique_ptr<nvme::QueuePair> q) {
    std::lock_guard lock(qmu);
    if (q)
      idle.push_back(std::move(q));
    else
      --made, no_more = false;  // dropped (it may hold commands in flight): another may be made
    qcv.notify_one();
  }

  // The DMA-mapped pieces of [p, p + len). Memory is mapped on first use: the 2 MiB-aligned
  // window around it when all of that is mapped memory (the blocks of one cache share few
  // windows), else just its pages. Mappings never overlap: a new one stops at its neighbours.
  void pieces(const std::byte* p, uint64_t len, std::vector<nvme::Piece>& out) {
    auto a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t end = a + len;
    std::lock_guard lock(mu);
    while (a < end) {
      auto next = mapped.upper_bound(a);  // the first mapping that ends after a
      if (next != mapped.end() && next->first - next->second->bytes() <= a) {
        const uintptr_t start = next->first - next->second->bytes();
        const uint64_t n = std::min(end, next->first) - a;
        out.push_back({next->second.get(), a - start, n});
        a += n;
        continue;
      }
      const uintptr_t room_lo = next == mapped.begin() ? 0 : std::prev(next)->first;
      const uintptr_t room_hi = next == mapped.end() ? UINTPTR_MAX : next->first - next->second->bytes();
      const uintptr_t lo = a / kPage * kPage, hi = std::min(room_hi, (end + kPage - 1) / kPage * kPage);
      const uintptr_t wlo = std::max(room_lo, a / kWindow * kWindow);
      const uintptr_t whi = std::min(room_hi, (end + kWindow - 1) / kWindow * kWindow);
      std::unique_ptr<nvme::DmaMemory> m;
      uintptr_t mhi = hi;
      if (wlo < lo || whi > hi) {
        try {
          m = std::make_unique<nvme::DmaMemory>(lease, ctrl, reinterpret_cast<void*>(wlo), whi - wlo);
          mhi = whi;
        } catch (const Error&) {  // part of the window is not mapped memory: the pages alone
        }
      }
      if (!m) m = std::make_unique<nvme::DmaMemory>(lease, ctrl, reinterpret_cast<void*>(lo), hi - lo);
      mapped.emplace(mhi, std::move(m));  // the loop goes on from the new mapping
    }
  }
};

nvme::DataPointer data_pointer(const BackendConfig& cfg, const nvme::ControllerInfo& ci) {
  if (cfg.nvme_data_pointer == "prp") return nvme::DataPointer::kPrp;
  TUTTI_EXPECT_CODE(ci.sgl || cfg.nvme_data_pointer != "sgl", TUTTI_EUNSUPPORTED,
                    "backend nvme: controller " + ci.bdf + " has no SGLs (nvme_data_pointer=prp or auto)");
  return ci.sgl ? nvme::DataPointer::kSgl : nvme::DataPointer::kPrp;
}

std::shared_ptr<Shared> open_shared(const BackendConfig& cfg) {
  auto s = std::make_shared<Shared>();
  s->ctrl = cfg.nvme_controller;
  for (int fd : cfg.fds) {
    nvme::Namespace ns = nvme::namespace_of(fd);
    nvme::ControllerInfo ci = s->lease.controller(s->ctrl, ns.nsid);
    TUTTI_EXPECT_CODE(!ns.subnqn.empty() && ns.subnqn == ci.subnqn, TUTTI_EUNSUPPORTED,
                      "backend nvme: tutti_kmod's controller " + std::to_string(s->ctrl) + " (" + ci.bdf +
                          ", subsystem " + ci.subnqn + ") does not share the pool's namespace " + ns.block +
                          " (subsystem " + ns.subnqn + ")");
    TUTTI_EXPECT_CODE(ci.lba_bytes == ns.lba, TUTTI_EUNSUPPORTED, "backend nvme: the two controllers disagree on the LBA size");
    s->dp = data_pointer(cfg, ci);
    s->spaces.push_back(std::move(ns));
    s->info.push_back(std::move(ci));
  }
  s->fds = cfg.fds;
  s->depth = std::min<uint32_t>({cfg.queue_depth + 1, s->info.empty() ? 2u : s->info.front().mqes, 1024u});
  return s;
}

}  // namespace

std::string nvme_unavailable_reason(const BackendConfig& cfg) {
  try {
    open_shared(cfg);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::unique_ptr<Backend> make_nvme_backend(const BackendConfig& cfg) {
  std::shared_ptr<Shared> s;
  try {
    s = open_shared(cfg);
  } catch (const Error& e) {
    fail(TUTTI_EUNSUPPORTED, std::string("backend nvme: ") + e.what(), e.site());
  }
  const nvme::ControllerInfo& ci = s->info.front();
  const std::string what = std::string("NVMe Read with ") + (s->dp == nvme::DataPointer::kSgl ? "SGLs" : "PRPs") +
                           " on tutti_kmod queue pairs of depth " + std::to_string(s->depth) + " (controller " +
                           ci.bdf + ", up to " + std::to_string(std::min(cfg.threads, ci.max_queues)) +
                           " pairs), extents by FIEMAP";
  return make_thread_backend(cfg, "nvme", what, [s](IoOp& op) -> int64_t {
    if (op.write) return -EINVAL;  // loads only
    std::unique_ptr<nvme::QueuePair> qp;
    try {  // the thread pool hands each op over whole (op.done is 0)
      const nvme::Namespace& ns = s->spaces[op.file];
      auto extents = nvme::file_extents(s->fds[op.file], op.offset, op.length);
      for (auto& e : extents) e.physical += ns.partition;
      std::vector<nvme::Piece> pieces;
      if (op.buf)
        s->pieces(op.buf, op.length, pieces);
      else
        for (int i = 0; i < op.iovcnt; ++i)
          s->pieces(static_cast<const std::byte*>(op.iov[i].iov_base), op.iov[i].iov_len, pieces);
      const nvme::Plan plan = nvme::plan(s->info[op.file], extents, pieces, s->dp);
      qp = s->take_queue();  // held only while its commands are in flight
      const nvme::IoCounts c = nvme::read(*qp, ns.nsid, plan);
      s->give_back(std::move(qp));
      return c.status ? -EIO : static_cast<int64_t>(op.length);
    } catch (const Error& e) {
      if (qp) {
        qp.reset();  // after a failure it may hold commands in flight: deleted, not reused
        s->give_back(nullptr);
      }
      return e.code() == TUTTI_EUNSUPPORTED ? -EOPNOTSUPP : e.code() == TUTTI_EINVAL ? -EINVAL : -EIO;
    }
  });
}

}  // namespace tutti
