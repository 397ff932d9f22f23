// SPDX-License-Identifier: Apache-2.0
// gpu-uring, the GPU side: one small kernel per layer writes the layer's read SQEs into the
// io_uring rings (mapped into the GPU's address space), publishes them, and (unless the host
// reaps) polls the completion queues until every read of the layer has landed in staging; a
// host callback on the same stream then hands the layer on to be copied into the blocks. See
// gpu_uring.hpp.
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/gpu_uring.hpp"
#include "kernels/nvme_cmd.hpp"  // compiled for the device too: the nvme backend's GPU producer
#include "kernels/sqe.hpp"

namespace tutti::gpu {
namespace {

// A ring as the device addresses it.
struct DevRing {
  uint32_t *sq_head, *sq_tail;
  io_uring_sqe* sqes;
  uint32_t *cq_head, *cq_tail;
  io_uring_cqe* cqes;
  uint32_t sq_mask, sq_entries, cq_mask, pad;
};

// Device memory shared by every layer kernel of one driver.
struct State {
  uint32_t lock[UringDriver::kMaxRings];    // who drains a ring's completion queue
  uint32_t ticket[UringDriver::kMaxRings];  // next SQ index to hand out
  unsigned long long done[UringDriver::kMaxStreams];  // reads completed, per stream
  int32_t* status[UringDriver::kMaxStreams];          // the running layer's status array
  uint32_t expect[UringDriver::kMaxStreams];          // its read length
};

using SysRef = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;
__device__ uint32_t load_acquire(uint32_t* p) { return SysRef(*p).load(cuda::memory_order_acquire); }
__device__ void store_release(uint32_t* p, uint32_t v) { SysRef(*p).store(v, cuda::memory_order_release); }

// Consumes every completion on ring r, for whichever stream's layer it belongs to
// (user_data = stream << 32 | chunk).
__device__ void drain(const DevRing& R, State* st, uint32_t r) {
  if (atomicCAS(&st->lock[r], 0u, 1u) != 0) return;
  uint32_t head = *reinterpret_cast<volatile uint32_t*>(R.cq_head);
  const uint32_t tail = load_acquire(R.cq_tail);
  for (; head != tail; ++head) {
    const volatile io_uring_cqe* c = R.cqes + (head & R.cq_mask);
    const uint64_t tag = c->user_data;
    const int32_t res = c->res;
    const uint32_t s = static_cast<uint32_t>(tag >> 32), i = static_cast<uint32_t>(tag);
    st->status[s][i] = read_status(res, static_cast<int32_t>(st->expect[s]));
    __threadfence_system();
    atomicAdd(&st->done[s], 1ull);
  }
  store_release(R.cq_head, tail);
  __threadfence();
  atomicExch(&st->lock[r], 0u);
}

// One block, one warp per ring. Reads of files whose bytes the CPU copies (tmpfs, zram) go to
// io_uring's workers (IOSQE_ASYNC): done inline, the SQPOLL thread would copy (and decompress)
// every byte itself. Warp r submits the chunks i with i % rings == r, then, with `poll`, its
// lane 0 drains ring r until all `target` reads of this stream are done; otherwise the kernel
// ends once its SQEs are published and the host reaps the completions.
__global__ void load_layer_io(const DevRing* rings, uint32_t nrings, State* st, uint32_t stream,
                              unsigned long long target, LayerLoad a, bool poll) {
  const uint32_t r = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    st->status[stream] = reinterpret_cast<int32_t*>(a.status);
    st->expect[stream] = static_cast<uint32_t>(a.layer_bytes);
    __threadfence();
  }
  __syncthreads();
  if (r >= nrings) return;
  const DevRing& R = rings[r];
  const uint32_t count = chunks_on_ring(a.n, r, nrings);
  if (count) {
    uint32_t t = 0;
    if (lane == 0) {
      t = atomicAdd(&st->ticket[r], count);
      // Room in the SQ: the SQPOLL thread frees entries as it submits them.
      while (t + count - load_acquire(R.sq_head) > R.sq_entries) __nanosleep(500);
    }
    t = __shfl_sync(0xffffffffu, t, 0);
    const auto* chunks = reinterpret_cast<const IoChunk*>(a.chunks);
    const auto* targets = reinterpret_cast<const IoTarget*>(a.targets);
    for (uint32_t j = lane; j < count; j += 32) {
      const uint32_t i = r + j * nrings;
      const IoChunk c = chunks[i];
      const IoTarget g = targets[i];
      const io_uring_sqe s = fixed_rw_sqe(false, c.file, g.host, static_cast<uint32_t>(a.layer_bytes),
                                          c.offset0 + a.layer * a.layer_bytes, static_cast<uint16_t>(g.buf_index),
                                          (uint64_t{stream} << 32) | i, c.async ? IOSQE_ASYNC : 0);
      const uint4* src = reinterpret_cast<const uint4*>(&s);
      uint4* dst = reinterpret_cast<uint4*>(R.sqes + ((t + j) & R.sq_mask));
      for (int q = 0; q < 4; ++q) dst[q] = src[q];
    }
    __syncwarp();
    if (lane == 0) {
      __threadfence_system();  // the SQEs before the tail that publishes them
      while (load_acquire(R.sq_tail) != t) __nanosleep(200);  // earlier tickets go first
      store_release(R.sq_tail, t + count);
    }
  }
  if (lane != 0 || !poll) return;
  volatile unsigned long long* done = &st->done[stream];
  while (*done < target) {
    drain(R, st, r);
    __nanosleep(1000);
  }
}

}  // namespace

UringDriver::UringDriver(Device& dev, const std::vector<RingView>& rings, bool poll_cqs)
    : dev_(dev), rings_(rings), poll_cqs_(poll_cqs) {
  TUTTI_EXPECT(!rings.empty() && rings.size() <= kMaxRings, "gpu-uring takes 1 to 8 rings");
  Guard g(dev_.ordinal());
  cudaFuncAttributes fa;  // loaded now: a lazy load would wait for spinning kernels (device.cu)
  check(cudaFuncGetAttributes(&fa, load_layer_io), "load kernel");
  // The rings' pages, mapped for the device. Where the SQ and CQ share one mmap it is
  // registered once.
  auto map = [&](void* p, size_t bytes) -> uint64_t {
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail(TUTTI_EUNSUPPORTED, std::string("gpu-uring: the GPU cannot map io_uring's ring memory (cudaHostRegister: ") +
                                   cudaGetErrorString(e) + ")");
    }
    registered_.push_back(p);
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer");
    return reinterpret_cast<uint64_t>(d);
  };
  std::vector<DevRing> views;
  std::vector<uint32_t> tickets;
  for (const RingView& v : rings_) {
    const uint64_t sq = map(v.sq_ring, v.sq_ring_bytes);
    const uint64_t cq = v.cq_ring == v.sq_ring ? sq : map(v.cq_ring, v.cq_ring_bytes);
    const uint64_t sqes = map(v.sqes, v.sqes_bytes);
    auto on = [](uint64_t dev_base, const void* host_base, const void* p) {
      return dev_base + (static_cast<const char*>(p) - static_cast<const char*>(host_base));
    };
    DevRing d{};
    d.sq_head = reinterpret_cast<uint32_t*>(on(sq, v.sq_ring, v.sq_head));
    d.sq_tail = reinterpret_cast<uint32_t*>(on(sq, v.sq_ring, v.sq_tail));
    d.sqes = reinterpret_cast<io_uring_sqe*>(sqes);
    d.cq_head = reinterpret_cast<uint32_t*>(on(cq, v.cq_ring, v.cq_head));
    d.cq_tail = reinterpret_cast<uint32_t*>(on(cq, v.cq_ring, v.cq_tail));
    d.cqes = reinterpret_cast<io_uring_cqe*>(on(cq, v.cq_ring, v.cqes));
    d.sq_mask = v.sq_mask, d.sq_entries = v.sq_entries, d.cq_mask = v.cq_mask;
    views.push_back(d);
    tickets.push_back(__atomic_load_n(v.sq_tail, __ATOMIC_ACQUIRE));
  }
  void* p = nullptr;
  check(cudaMalloc(&p, sizeof(State) + views.size() * sizeof(DevRing)), "cudaMalloc");
  state_ = p;
  State st{};
  std::memcpy(st.ticket, tickets.data(), tickets.size() * sizeof(uint32_t));
  check(cudaMemcpy(state_, &st, sizeof st, cudaMemcpyHostToDevice), "cudaMemcpy");
  views_ = reinterpret_cast<uint64_t>(p) + sizeof(State);
  check(cudaMemcpy(reinterpret_cast<void*>(views_), views.data(), views.size() * sizeof(DevRing), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  for (uint32_t i = 0; i < kMaxStreams; ++i) {
    cudaStream_t cs;
    check(cudaStreamCreateWithPriority(&cs, cudaStreamNonBlocking, dev_.load_priority()), "cudaStreamCreate");
    streams_[i] = cs;
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    freed_[i] = e;
  }
}

UringDriver::~UringDriver() {
  cudaSetDevice(dev_.ordinal());
  for (void* s : streams_) {
    if (!s) continue;
    cudaStreamSynchronize(static_cast<cudaStream_t>(s));
    cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
  // A `freed` record may still be pending behind a callback: CUDA frees its event once it is.
  for (void* e : freed_)
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (state_) cudaFree(state_);
  for (void* p : registered_) cudaHostUnregister(p);
}

uint32_t UringDriver::max_per_ring() const {
  // Every stream may have a layer's reads in flight on a ring at once.
  uint32_t m = ~0u;
  for (const RingView& v : rings_) m = std::min(m, std::min(v.sq_entries, v.cq_entries / kMaxStreams));
  return m;
}

void UringDriver::read_layer(uint32_t stream, const LayerLoad& a, void (*read)(void*), void* arg, bool* submitted) {
  TUTTI_EXPECT(stream < kMaxStreams, "gpu-uring: stream out of range");
  TUTTI_EXPECT(a.layer_bytes < (1ull << 31), "gpu-uring: a chunk-layer extent must be below 2 GiB");
  const uint32_t nrings = static_cast<uint32_t>(rings_.size());
  TUTTI_EXPECT((a.n + nrings - 1) / nrings <= max_per_ring(),
               "gpu-uring: " + std::to_string(a.n) + " chunks in one layer is more than the rings hold");
  TUTTI_EXPECT_CODE(!broken_, TUTTI_EIO, "gpu-uring: a layer's launch failed before; this runtime's gpu-uring queues no more");
  Guard g(dev_.ordinal());
  auto s = static_cast<cudaStream_t>(streams_[stream]);
  bool counted = false, launched = false;
  try {
    if (a.n) {
      check(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(freed_[stream]), 0), "cudaStreamWaitEvent");
      launched_[stream] += a.n;
      counted = true;
      cudaGetLastError();  // an error left by an earlier call must not read as this launch's
      load_layer_io<<<1, 32 * nrings, 0, s>>>(reinterpret_cast<const DevRing*>(views_), nrings,
                                               static_cast<State*>(state_), stream, launched_[stream], a, poll_cqs_);
      check(cudaGetLastError(), "gpu-uring kernel launch");
      launched = true;
    }
    check(cudaLaunchHostFunc(s, read, arg), "cudaLaunchHostFunc");
  } catch (...) {
    // The read kernel may be running: its reads land in staging the caller frees once it has
    // failed the layer, so wait for the stream first (a polling kernel ends with its reads;
    // otherwise the caller waits for their completions, as *submitted tells it). A kernel that
    // never ran leaves launched_ counting reads no ring will complete, and the stream's next
    // kernel would spin forever: none comes then, nor after a failed synchronize.
    const bool synced = cudaStreamSynchronize(s) == cudaSuccess;
    if (!synced || (counted && !launched)) broken_ = true;
    if (submitted) *submitted = launched && synced;
    throw;
  }
}

}  // namespace tutti::gpu
