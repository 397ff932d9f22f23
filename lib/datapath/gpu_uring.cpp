// SPDX-License-Identifier: Apache-2.0
#include "datapath/gpu_uring.hpp"
#include "common/thread_name.hpp"

#include <liburing.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"

namespace tutti {
namespace {

constexpr unsigned kSqEntries = 2048;
constexpr unsigned kCqEntries = 2 * kSqEntries;
// A SQPOLL thread sleeps after sqpoll_idle_ms without submissions; while layers are in flight
// the waker checks every kWakerPeriod and wakes it (and every launch wakes the rings too). A
// short period costs CPU in proportion to time: 50 µs cost 4.8 ms per 84 ms disk layer.
constexpr auto kWakerPeriod = std::chrono::milliseconds(1);

}  // namespace

std::string gpu_uring_unavailable_reason() {
  std::string why = gpu::unavailable_reason();
  if (!why.empty()) return why;
  io_uring ring;
  io_uring_params p{};
  p.flags = IORING_SETUP_SQPOLL;
  p.sq_thread_idle = 1;
  int rc = io_uring_queue_init_params(4, &ring, &p);
  if (rc < 0) return std::string("no SQPOLL io_uring here (io_uring_setup: ") + std::strerror(-rc) + ")";
  io_uring_queue_exit(&ring);
  return "";
}

// A layer whose read kernel has run: its copy (none: it failed after its reads were submitted).
struct GpuUring::Read {
  GpuUring* self;
  uint32_t stream;
  void (*copy)(void*);
  void* arg;
};

GpuUring::GpuUring(gpu::Device& dev, const BackendConfig& cfg)
    : idle_ms_(cfg.sqpoll_idle_ms ? cfg.sqpoll_idle_ms : 2), host_reaps_(!cfg.gpu_completions) {
  const unsigned n = std::min<unsigned>(cfg.rings ? cfg.rings : 1, gpu::UringDriver::kMaxRings);
  std::vector<gpu::RingView> views;
  for (unsigned i = 0; i < n; ++i) {
    auto ring = std::make_unique<io_uring>();
    io_uring_params p{};
    p.flags = IORING_SETUP_SQPOLL | IORING_SETUP_CQSIZE;
    p.sq_thread_idle = idle_ms_;
    p.cq_entries = kCqEntries;
    if (cfg.sqpoll_shared && i > 0) {  // the first ring's SQPOLL thread serves them all
      p.flags |= IORING_SETUP_ATTACH_WQ;
      p.wq_fd = static_cast<uint32_t>(rings_[0]->ring_fd);
    }
    int rc = io_uring_queue_init_params(kSqEntries, ring.get(), &p);
    if (rc < 0) fail_errno(-rc, "gpu-uring: io_uring_setup with SQPOLL");
    rings_.push_back(std::move(ring));
    io_uring* r = rings_.back().get();
    if (!cfg.fds.empty() && (rc = io_uring_register_files(r, cfg.fds.data(), static_cast<unsigned>(cfg.fds.size()))) < 0)
      fail_errno(-rc, "gpu-uring: io_uring_register_files");
    if (!cfg.staging.empty() &&
        (rc = io_uring_register_buffers(r, cfg.staging.data(), static_cast<unsigned>(cfg.staging.size()))) < 0)
      fail_errno(-rc, "gpu-uring: io_uring_register_buffers (staging)");
    // The GPU writes SQE i into slot i: make the SQ index array the identity.
    for (unsigned k = 0; k <= r->sq.ring_mask; ++k) r->sq.array[k] = k;
    gpu::RingView v;
    v.sq_ring = r->sq.ring_ptr, v.sq_ring_bytes = r->sq.ring_sz;
    v.cq_ring = r->cq.ring_ptr, v.cq_ring_bytes = r->cq.ring_sz;
    v.sqes = r->sq.sqes, v.sqes_bytes = sizeof(io_uring_sqe) * (r->sq.ring_mask + 1);
    v.sq_head = r->sq.khead, v.sq_tail = r->sq.ktail, v.sq_flags = r->sq.kflags;
    v.sq_mask = r->sq.ring_mask, v.sq_entries = r->sq.ring_entries;
    v.cq_head = r->cq.khead, v.cq_tail = r->cq.ktail;
    v.cq_mask = r->cq.ring_mask, v.cq_entries = r->cq.ring_entries;
    v.cqes = r->cq.cqes;
    views.push_back(v);
  }
  try {
    driver_ = std::make_unique<gpu::UringDriver>(dev, views, /*poll_cqs=*/!host_reaps_);
  } catch (...) {
    for (auto& r : rings_) io_uring_queue_exit(r.get());
    throw;
  }
  max_chunks_ = driver_->max_per_ring() * n;
  waker_ = std::thread([this] { run_waker(); });
  copier_ = std::thread([this] { run_copier(); });
}

GpuUring::~GpuUring() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
    stop_ = true;
  }
  cv_.notify_all();
  read_cv_.notify_all();
  waker_.join();
  copier_.join();
  driver_.reset();  // unmaps the rings from the GPU before they go
  for (auto& r : rings_) io_uring_queue_exit(r.get());
}

std::string GpuUring::describe() const {
  return "gpu-uring: " + std::to_string(rings_.size()) + " SQPOLL rings x " + std::to_string(kSqEntries) +
         " entries (idle " + std::to_string(idle_ms_) + " ms), GPU-built SQEs, " +
         (host_reaps_ ? "CQs reaped by the copier thread" : "GPU-polled CQs");
}

void GpuUring::load_layer(uint32_t stream, const gpu::LayerLoad& a, int32_t* status, void (*copy)(void*), void* arg) {
  // On a CUDA thread, in stream order after the read kernel: hands the layer to the copier.
  auto over = [](void* p) {
    auto* r = static_cast<Read*>(p);
    GpuUring* self = r->self;
    std::lock_guard lock(self->mu_);  // notified under it: the copier may let ~GpuUring go
    self->reads_.push_back(r);
    self->read_cv_.notify_one();
  };
  TUTTI_EXPECT(stream < gpu::UringDriver::kMaxStreams, "gpu-uring: stream out of range");
  auto r = std::make_unique<Read>(Read{this, stream, copy, arg});
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return copied_[stream] == issued_[stream]; });
    if (host_reaps_) {  // the stream's previous layer is reaped: no read of it completes now
      // (status itself is not written before the read kernel has waited for freed(stream):
      // the previous layer's copies and checks read it until then)
      Reaping& rp = reaping_[stream];
      rp = Reaping{status, static_cast<int32_t>(a.layer_bytes), a.n, {}};
      const uint32_t n = static_cast<uint32_t>(rings_.size());
      for (uint32_t k = 0; k < n; ++k) rp.left[k] = gpu::chunks_on_ring(a.n, k, n);
    }
    ++issued_[stream];
    if (in_flight_++ == 0) cv_.notify_all();
  }
  wake_idle();  // the kernel may run at once: have the rings' threads awake for it
  bool submitted = false;
  try {
    driver_->read_layer(stream, a, over, r.get(), &submitted);
    r.release();  // over() has it
  } catch (...) {
    std::unique_lock lock(mu_);
    if (host_reaps_ && submitted) {
      // Its reads are in flight, and only the copier reaps: have it reap them (no copies)
      // before the caller fails the layer and gives their staging back.
      r->copy = nullptr;
      reads_.push_back(r.release());
      read_cv_.notify_one();
      cv_.wait(lock, [&] { return copied_[stream] == issued_[stream]; });
    } else {
      --issued_[stream];
      --in_flight_;
      reaping_[stream] = Reaping{};
    }
    lock.unlock();
    cv_.notify_all();
    throw;
  }
}

// Queues the copies of each layer whose read kernel has run, in the order they ran, once its
// reads are over (reaping them first when the host reaps). copy() may land the layer and free
// its batch (never this object: it outlives every batch).
void GpuUring::run_copier() {
  name_this_thread("tutti-copier");
  std::unique_lock lock(mu_);
  for (;;) {
    read_cv_.wait(lock, [&] { return stop_ || !reads_.empty(); });
    if (reads_.empty()) return;
    Read* r = reads_.front();
    reads_.pop_front();
    lock.unlock();
    if (host_reaps_) reap(r->stream);
    try {
      if (r->copy) r->copy(r->arg);  // none: a layer that failed after its reads were submitted
    } catch (const std::exception& e) {  // copy() fails and lands the layer on what it expects
      log(TUTTI_LOG_ERROR, std::string("gpu-uring: a layer's copies could not be queued: ") + e.what());
    }
    const uint32_t stream = r->stream;
    delete r;
    lock.lock();
    ++copied_[stream];
    --in_flight_;
    cv_.notify_all();
  }
}

// Waits on each ring for the completions the stream's layer still awaits there, booking those
// of other streams' layers met on the way. Runs once the layer's read kernel has run (after
// its wait for freed(stream)), so `status` is the layer's to write. Where io_uring_enter
// fails, it polls the completion queue instead: a layer never ends with its reads in flight.
void GpuUring::reap(uint32_t stream) {
  for (size_t k = 0; k < rings_.size(); ++k) {
    io_uring* ring = rings_[k].get();
    for (;;) {
      unsigned want;
      {
        std::lock_guard lock(mu_);
        want = reaping_[stream].left[k];
      }
      if (!want) break;
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe_nr(ring, &cqe, want);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIME) {
        if (!poll_warned_.exchange(true))
          log(TUTTI_LOG_WARN, std::string("gpu-uring: waiting for a ring's completions: ") + std::strerror(-rc) +
                                  "; polling the completion queue instead");
        while (io_uring_cq_ready(ring) < want) std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      unsigned head, seen = 0;
      std::lock_guard lock(mu_);
      io_uring_for_each_cqe(ring, head, cqe) {
        Reaping& r = reaping_[static_cast<uint32_t>(cqe->user_data >> 32) % gpu::UringDriver::kMaxStreams];
        const uint32_t i = static_cast<uint32_t>(cqe->user_data);
        if (i < r.n && r.left[k]) {
          r.status[i] = gpu::read_status(cqe->res, r.expect);
          --r.left[k];
        }
        ++seen;
      }
      io_uring_cq_advance(ring, seen);
    }
  }
}

void GpuUring::wake_idle() {
  for (auto& r : rings_)
    if (IO_URING_READ_ONCE(*r->sq.kflags) & IORING_SQ_NEED_WAKEUP)
      io_uring_enter(static_cast<unsigned>(r->ring_fd), 0, 0, IORING_ENTER_SQ_WAKEUP, nullptr);
}

void GpuUring::run_waker() {
  name_this_thread("tutti-waker");
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || in_flight_ > 0; });
    if (stop_) return;
    lock.unlock();
    wake_idle();
    std::this_thread::sleep_for(kWakerPeriod);
    lock.lock();
  }
}

}  // namespace tutti
