// SPDX-License-Identifier: Apache-2.0
// CUDA kernels and the device glue: copy a layer's chunks between the object layout in pinned
// staging and the engine's paged blocks, one launch per layer for a whole batch.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device.hpp"
#include "kernels/layer_sum.hpp"

namespace tutti::gpu {
namespace {

__constant__ sum::Secret kSecret = sum::make_secret();
constexpr uint32_t kKeys = sum::kSecretBytes - 7;  // a 64-bit key at every byte offset

// 16 bytes of a chunk-layer object at offset `o` (a multiple of 16) as the extent lies on disk,
// read from the blocks for the tokens the span moves and from the chunk's `stage` (its object
// bytes) for the others; the padding after K and after V reads as zeros.
template <bool kVec>
__device__ uint4 object16(const CopyLayout& l, const char* k, const char* v, const int32_t* blocks,
                          const ChunkSpan& span, const char* stage, uint64_t o) {
  const bool is_v = o >= l.v_offset;
  const uint64_t off = is_v ? o - l.v_offset : o;
  const char* base = is_v ? v : k;
  uint4 z = make_uint4(0, 0, 0, 0);
  if constexpr (kVec) {  // runs and tokens are whole 16-byte words
    if (off >= l.kv_bytes) return z;
    const uint64_t t = off / l.token_bytes;
    if (t < span.lo || t >= span.hi) return *reinterpret_cast<const uint4*>(stage + o);
    const uint64_t u = off / l.run_bytes;
    return *reinterpret_cast<const uint4*>(base + run_offset(l, blocks, span.tok0, u) + (off - u * l.run_bytes));
  } else {
    uint8_t b[16];
    for (int i = 0; i < 16; ++i) {
      const uint64_t x = off + i;
      const uint64_t u = x / l.run_bytes, t = x / l.token_bytes;
      b[i] = x >= l.kv_bytes                 ? 0
             : t < span.lo || t >= span.hi ? static_cast<uint8_t>(stage[o + i])
                                            : static_cast<uint8_t>(base[run_offset(l, blocks, span.tok0, u) +
                                                                        (x - u * l.run_bytes)]);
    }
    memcpy(&z, b, 16);
    return z;
  }
}

// The secret as a 64-bit key at every byte offset, in shared memory (the hash reads keys at
// offsets that are not multiples of 8). Every thread of the block helps; then they sync.
__device__ void load_keys(uint64_t* keys) {
  for (unsigned i = threadIdx.x; i < kKeys; i += blockDim.x) keys[i] = sum::read64(kSecret.bytes + i);
  __syncthreads();
}

__device__ uint64_t shfl_xor64(uint64_t x, int m) {
  return (uint64_t(__shfl_xor_sync(~0u, uint32_t(x >> 32), m)) << 32) | __shfl_xor_sync(~0u, uint32_t(x), m);
}

// XXH3-64 of one 4 KiB page under tutti's secret (kernels/layer_sum.hpp), by a whole warp:
// w[s] holds page bytes [s*512 + lane*16, +16), i.e. words 2q, 2q+1 (q = lane % 4) of stripe
// s*8 + lane/4. A stripe's words feed accumulators independently and, within a 1 KiB block,
// by plain addition, so each block is a sum over lanes before its scramble. Every lane
// returns the hash.
__device__ uint64_t warp_page_hash(const uint4 (&w)[8], unsigned lane, const uint64_t* keys) {
  const unsigned q = lane & 3;
  uint64_t init[8];
  sum::init_acc(init);
  uint64_t a0 = init[2 * q], a1 = init[2 * q + 1];
  for (unsigned b = 0; b < 4; ++b) {
    uint64_t v0 = 0, v1 = 0;
    for (unsigned h = 0; h < 2; ++h) {
      const unsigned s = 2 * b + h, g = s * 8 + lane / 4;
      const uint64_t d0 = (uint64_t(w[s].y) << 32) | w[s].x, d1 = (uint64_t(w[s].w) << 32) | w[s].z;
      // The page's last stripe is not part of block 3's 15; it counts once, under the tail.
      const unsigned key = (g == 63 ? sum::kSecretBytes - 64 - 7 : (g % 16) * 8) + 16 * q;
      v0 += sum::mul32(d0 ^ keys[key]) + d1;
      v1 += sum::mul32(d1 ^ keys[key + 8]) + d0;
    }
    for (int m = 4; m < 32; m <<= 1) {
      v0 += shfl_xor64(v0, m);
      v1 += shfl_xor64(v1, m);
    }
    a0 += v0, a1 += v1;
    if (b < 3) {
      const unsigned key = sum::kSecretBytes - 64 + 16 * q;
      a0 = sum::scramble(a0, keys[key]);
      a1 = sum::scramble(a1, keys[key + 8]);
    }
  }
  uint64_t t = sum::fold128(a0 ^ keys[11 + 16 * q], a1 ^ keys[11 + 16 * q + 8]);
  t += shfl_xor64(t, 1);
  t += shfl_xor64(t, 2);
  return sum::avalanche(uint64_t{sum::kPageBytes} * sum::kPrime64_1 + t);
}

// Tests: the warp hash of n plain pages in device memory, out[i] for page i (one warp each).
__global__ void page_hash_kernel(const uint4* pages, uint64_t* out) {
  __shared__ uint64_t keys[kKeys];
  load_keys(keys);
  uint4 w[8];
  const uint4* page = pages + blockIdx.x * (sum::kPageBytes / 16);
  for (unsigned s = 0; s < 8; ++s) w[s] = page[s * 32 + threadIdx.x];
  const uint64_t h = warp_page_hash(w, threadIdx.x, keys);
  if (threadIdx.x == 0) out[blockIdx.x] = h;
}

// The object bytes of chunk `i` of a launch: in device staging at stage_base + i * extent, or
// at its own staging address.
__device__ const char* chunk_stage(const CopyLayout& l, const ChunkCopy& c, const char* stage_base, unsigned i) {
  return stage_base ? stage_base + i * l.sides * l.v_offset : reinterpret_cast<const char*>(c.staging);
}

// One thread block per chunk: its warps hash the chunk-layer's pages where they landed, in the
// blocks (the tokens its span leaves alone: in its staging), and terms[chunk] receives the sum
// of the page terms (the CPU finishes and compares). A chunk whose `status` is not 0 gets no
// term.
template <bool kVec>
__global__ void layer_terms(CopyLayout l, const char* k, const char* v, const ChunkCopy* chunks, const int32_t* ids,
                            const int32_t* status, uint64_t* terms, uint64_t pages, const char* stage_base) {
  __shared__ uint64_t keys[kKeys];
  __shared__ uint64_t warp_terms[32];
  load_keys(keys);
  if (status && status[blockIdx.x]) return;
  const ChunkCopy c = chunks[blockIdx.x];
  const int32_t* blocks = ids + c.first_block;
  const char* stage = chunk_stage(l, c, stage_base, blockIdx.x);
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint64_t acc = 0;
  for (uint64_t p = warp; p < pages; p += warps) {
    uint4 w[8];
    for (unsigned s = 0; s < 8; ++s)
      w[s] = object16<kVec>(l, k, v, blocks, c.span, stage, p * sum::kPageBytes + s * 512 + lane * 16);
    acc += sum::page_term(warp_page_hash(w, lane, keys), p);
  }
  if (lane == 0) warp_terms[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t t = 0;
    for (unsigned i = 0; i < warps; ++i) t += warp_terms[i];
    terms[blockIdx.x] = t;
  }
}

// Grid: y = chunk, x * warps = runs of both sides. Each warp moves one run at a time, its lanes
// striding 16 bytes (or 1 byte where the layout is not 16-byte aligned): of a run, the tokens
// the chunk's span moves (a gather writes zeros for the others). A chunk whose `status` is not
// 0 (its read failed) is left alone. The chunk's object bytes are at its `staging` address,
// or, with `stage` (device staging), at stage + chunk * extent.
template <bool kToBlocks, bool kVec>
__global__ void copy_layer(CopyLayout l, char* k, char* v, const ChunkCopy* chunks, const int32_t* ids,
                           const int32_t* status, char* stage_base) {
  if (status && status[blockIdx.y]) return;
  const ChunkCopy c = chunks[blockIdx.y];
  const int32_t* blocks = ids + c.first_block;
  char* stage = const_cast<char*>(chunk_stage(l, c, stage_base, blockIdx.y));
  const uint64_t runs = l.kv_bytes / l.run_bytes;
  const unsigned lane = threadIdx.x & 31;
  const unsigned warps = gridDim.x * (blockDim.x >> 5);
  for (uint64_t r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < l.sides * runs; r += warps) {
    const bool is_v = r >= runs;
    const uint64_t u = is_v ? r - runs : r;
    uint64_t from, to;
    run_window(l, c.span, u, &from, &to);
    from = from > u * l.run_bytes ? from - u * l.run_bytes : 0;
    to = to > u * l.run_bytes ? to - u * l.run_bytes : 0;
    char* obj = stage + (is_v ? l.v_offset : 0) + u * l.run_bytes;
    if (!kToBlocks && (from > 0 || to < l.run_bytes)) {  // a store writes zeros for the tokens its span leaves out
      for (uint64_t o = lane; o < l.run_bytes; o += 32)
        if (o < from || o >= to) obj[o] = 0;
    }
    if (from >= to) continue;
    char* mem = (is_v ? v : k) + run_offset(l, blocks, c.span.tok0, u);
    char* dst = kToBlocks ? mem : obj;
    const char* src = kToBlocks ? obj : mem;
    if (kVec) {
      for (uint64_t o = from + lane * 16; o < to; o += 32 * 16)
        *reinterpret_cast<uint4*>(dst + o) = *reinterpret_cast<const uint4*>(src + o);
    } else {
      for (uint64_t o = from + lane; o < to; o += 32) dst[o] = src[o];
    }
  }
}

// One warp waits until every load batch up to `epoch` has landed the layer (0: up to the newest
// batch when the wait runs) (system-scope reads of pinned host memory written by the CPU).
__global__ void wait_layer(const volatile uint64_t* control, uint32_t layer, uint64_t epoch) {
  if (threadIdx.x != 0) return;
  if (!epoch) epoch = control[0];
  while (control[1 + layer] < epoch) __nanosleep(2000);
  __threadfence_system();
}

bool vec_ok(const CopyLayout& l, const void* k, const void* v) {
  auto a = [](uint64_t x) { return x % 16 == 0; };
  return a(l.run_bytes) && a(l.token_bytes) && a(l.block_stride) && a(l.token_stride) && a(l.head_stride) &&
         a(l.v_offset) && a(reinterpret_cast<uintptr_t>(k)) && a(reinterpret_cast<uintptr_t>(v));
}

void launch_terms(cudaStream_t s, const CopyLayout& l, const char* k, const char* v, const ChunkCopy* chunks,
                  size_t n, const int32_t* ids, const int32_t* status, uint64_t* terms, const char* stage = nullptr) {
  const uint64_t pages = l.sides * l.v_offset / sum::kPageBytes;
  if (vec_ok(l, k, v))
    layer_terms<true><<<static_cast<unsigned>(n), 512, 0, s>>>(l, k, v, chunks, ids, status, terms, pages, stage);
  else
    layer_terms<false><<<static_cast<unsigned>(n), 512, 0, s>>>(l, k, v, chunks, ids, status, terms, pages, stage);
  check(cudaGetLastError(), "checksum kernel launch");
}

// Copies a layer; loads with `terms` then checksum what landed, on the same stream.
template <bool kToBlocks>
void launch(cudaStream_t s, const CopyLayout& l, char* k, char* v, const ChunkCopy* chunks, size_t n,
            const int32_t* ids, const int32_t* status = nullptr, uint64_t* terms = nullptr, char* stage = nullptr) {
  const unsigned threads = 256, warps = threads / 32;
  const uint64_t runs = l.sides * (l.kv_bytes / l.run_bytes);
  const unsigned x = static_cast<unsigned>(std::min<uint64_t>((runs + warps - 1) / warps, 64));
  const bool vec = vec_ok(l, k, v);
  constexpr size_t kMaxGridY = 65535;  // a chunk per grid row: a launch per slice of that many
  for (size_t i = 0; i < n; i += kMaxGridY) {
    const dim3 grid(x, static_cast<unsigned>(std::min(n - i, kMaxGridY)));
    const int32_t* st = status ? status + i : nullptr;
    char* sg = stage ? stage + i * l.sides * l.v_offset : nullptr;
    if (vec)
      copy_layer<kToBlocks, true><<<grid, threads, 0, s>>>(l, k, v, chunks + i, ids, st, sg);
    else
      copy_layer<kToBlocks, false><<<grid, threads, 0, s>>>(l, k, v, chunks + i, ids, st, sg);
    check(cudaGetLastError(), "copy kernel launch");
  }
  if (kToBlocks && terms) launch_terms(s, l, k, v, chunks, n, ids, status, terms, stage);
}

// DMA between `m` chunks' object bytes in mapped host memory and device staging, where chunk j
// lies at stage + j * extent; chunks adjacent in host memory move in one copy. A chunk whose
// status (host-visible) is not 0 is skipped.
void copy_stage(cudaStream_t s, char* stage, const ChunkCopy* chunks, const int32_t* status, size_t m,
                uint64_t extent, bool to_device) {
  size_t first = 0, run = 0;  // a run of chunks contiguous in host memory
  auto flush = [&] {
    if (!run) return;
    char* dev = stage + first * extent;
    auto* host = reinterpret_cast<char*>(chunks[first].staging);
    check(to_device ? cudaMemcpyAsync(dev, host, run * extent, cudaMemcpyHostToDevice, s)
                    : cudaMemcpyAsync(host, dev, run * extent, cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync (device staging)");
    run = 0;
  };
  for (size_t j = 0; j < m; ++j) {
    if (status && status[j]) {
      flush();
      continue;
    }
    if (run && chunks[j].staging == chunks[first].staging + run * extent) {
      ++run;
      continue;
    }
    flush();
    first = j, run = 1;
  }
  flush();
}

// The calling thread's own stream for the synchronous work of tutti's threads. Not
// cudaStreamPerThread: that one waits for the legacy default stream, where an engine (torch's
// default stream) may have queued a stream-ordered wait for the very layer this work lands.
cudaStream_t thread_stream(int ordinal) {
  struct Owned {
    int ordinal = -1;
    cudaStream_t s = nullptr;
    ~Owned() {
      if (s) cudaStreamDestroy(s);
    }
  };
  thread_local Owned t;
  if (t.ordinal != ordinal) {
    if (t.s) cudaStreamDestroy(t.s);
    t.s = nullptr;
    check(cudaStreamCreateWithFlags(&t.s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    t.ordinal = ordinal;
  }
  return t.s;
}

}  // namespace

std::string unavailable_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA driver or device: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device";
  return "";
}

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Device::Device(int ordinal, bool high_load_priority) : ordinal_(ordinal) {
  std::string why = unavailable_reason();
  if (!why.empty()) fail(TUTTI_EUNSUPPORTED, why);
  TUTTI_EXPECT(ordinal >= 0 && ordinal < device_count(), "CUDA device " + std::to_string(ordinal) + " does not exist");
  Guard g(ordinal_);
  // Load every kernel now. With lazy module loading (CUDA's default), a kernel's first launch
  // waits for the device to go idle, which never happens while a layer-wait kernel spins on
  // the engine's stream for that very scatter: a deadlock.
  cudaFuncAttributes a;
  check(cudaFuncGetAttributes(&a, copy_layer<true, true>), "load kernel");
  check(cudaFuncGetAttributes(&a, copy_layer<true, false>), "load kernel");
  check(cudaFuncGetAttributes(&a, copy_layer<false, true>), "load kernel");
  check(cudaFuncGetAttributes(&a, copy_layer<false, false>), "load kernel");
  check(cudaFuncGetAttributes(&a, wait_layer), "load kernel");
  check(cudaFuncGetAttributes(&a, layer_terms<true>), "load kernel");
  check(cudaFuncGetAttributes(&a, layer_terms<false>), "load kernel");
  if (high_load_priority) {
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    load_priority_ = greatest;
  }
  cudaStream_t s;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, load_priority_), "cudaStreamCreate");
  stream_ = s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  gather_stream_ = s;
  // A blocking-sync event: waiting for a gather sleeps. cudaStreamSynchronize spins: on the
  // H200 (2ef9970) the scheduler thread's CPU per 128K-token store layer, 10-11 ms, matched
  // the time a 512 MiB gather takes over PCIe.
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming), "cudaEventCreate");
  gathered_ = e;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, load_priority_), "cudaStreamCreate");
  dma_stream_ = s;
  for (int h = 0; h < 2; ++h)
    for (void** at : {&half_filled_[h], &half_emptied_[h]}) {
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      *at = e;
    }
}

Device::~Device() {
  cudaSetDevice(ordinal_);
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamSynchronize(static_cast<cudaStream_t>(gather_stream_));
  cudaStreamSynchronize(static_cast<cudaStream_t>(dma_stream_));
  cudaFree(load_stage_.base);
  cudaFree(store_stage_.base);
  if (control_) cudaFreeHost(control_);
  for (Pinned& b : pinned_) cudaFreeHost(b.host);
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(gather_stream_));
  cudaEventDestroy(static_cast<cudaEvent_t>(gathered_));
  cudaStreamDestroy(static_cast<cudaStream_t>(dma_stream_));
  for (int h = 0; h < 2; ++h) {
    cudaEventDestroy(static_cast<cudaEvent_t>(half_filled_[h]));
    cudaEventDestroy(static_cast<cudaEvent_t>(half_emptied_[h]));
  }
  for (void* e : queued_events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

void Device::set_layers(uint32_t layers) {
  Guard g(ordinal_);
  void* p = nullptr;
  check(cudaHostAlloc(&p, (1 + layers) * sizeof(uint64_t), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  control_ = static_cast<uint64_t*>(p);
  std::memset(control_, 0, (1 + layers) * sizeof(uint64_t));
  epochs_ = std::make_unique<LayerEpochs>(layers);
  queued_epochs_ = std::make_unique<LayerEpochs>(layers);
  queued_ = std::vector<uint64_t>(layers, 0);
  for (uint32_t l = 0; l < layers; ++l) {
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    queued_events_.push_back(e);
  }
  void* d = nullptr;
  check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer");
  control_dev_ = static_cast<uint64_t*>(d);
}

namespace {
// Whether `s` is capturing a CUDA graph; empty when CUDA cannot tell (asked of the legacy
// stream while another stream captures).
std::optional<bool> capturing(cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return capture != cudaStreamCaptureStatusNone;
}

// Never backwards: batches submitted from two threads may announce their epochs out of order.
void store_max(uint64_t* at, uint64_t v) {
  uint64_t seen = __atomic_load_n(at, __ATOMIC_RELAXED);
  while (seen < v && !__atomic_compare_exchange_n(at, &seen, v, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
  }
}
}  // namespace

void Device::begin_epoch(uint64_t epoch) { store_max(&control_[0], epoch); }

void Device::mark_ready(uint32_t layer, uint64_t epoch) {
  store_max(&control_[1 + layer], epochs_->landed(layer, epoch));
  // In place is queued too (a second mark of an epoch changes nothing). No record: this runs in
  // host callbacks; a newer batch this publishes recorded the event when its copies were queued.
  store_max(&queued_[layer], queued_epochs_->landed(layer, epoch));
  { std::lock_guard lock(ready_mu_); }  // a host waiter between its check and its sleep sees the store
  ready_cv_.notify_all();
}

// Record first, then count the epoch: whoever publishes an epoch (here or in mark_ready) does
// so after every batch up to it has been counted, so after each of their records, and the
// event's newest record covers the copies of every batch up to the published epoch that is
// not in place. A record that fails leaves the epoch uncounted: waits for it go on until the
// layer is in place. Never throws (it runs on I/O threads).
void Device::mark_queued(uint32_t layer, uint64_t epoch) noexcept {
  bool recorded;
  {
    QuietGuard g(ordinal_);
    recorded = g.ok() && cudaEventRecord(static_cast<cudaEvent_t>(queued_events_[layer]),
                                         static_cast<cudaStream_t>(stream_)) == cudaSuccess;
  }
  if (!recorded) {
    cudaGetLastError();
    return;
  }
  store_max(&queued_[layer], queued_epochs_->landed(layer, epoch));
  { std::lock_guard lock(ready_mu_); }
  ready_cv_.notify_all();
}

bool Device::enqueue_wait(void* stream, uint32_t layer, uint64_t epoch, std::chrono::milliseconds timeout) {
  Guard g(ordinal_);
  auto s = static_cast<cudaStream_t>(stream);
  // A captured graph replays for later batches: its waits read the newest epoch when they run.
  // (Asked of the legacy stream while another stream captures, CUDA cannot tell; the legacy
  // stream itself is never captured, so that is a wait outside capture.)
  const bool captured = capturing(s).value_or(false);
  TUTTI_EXPECT_CODE(!captured || !timeout.count(), TUTTI_EUNSUPPORTED,
                    "option load_timeout_ms: a wait captured into a CUDA graph runs without the host and cannot "
                    "give up; capture with load_timeout_ms 0");
  if (!captured && (!gpu_waits_ || timeout.count())) {
    auto in_place = [&] { return __atomic_load_n(&control_[1 + layer], __ATOMIC_ACQUIRE) >= epoch; };
    auto queued = [&] { return in_place() || __atomic_load_n(&queued_[layer], __ATOMIC_ACQUIRE) >= epoch; };
    {
      std::unique_lock lock(ready_mu_);
      if (!timeout.count()) ready_cv_.wait(lock, queued);
      else if (!ready_cv_.wait_for(lock, timeout, queued)) return false;
    }
    if (in_place()) return true;
    // Not yet in place, but every copy it needs is queued on tutti's stream: the engine's
    // stream waits for them on the GPU, without a kernel, while its thread runs ahead.
    if (!gpu_waits_) {
      check(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(queued_events_[layer]), 0), "cudaStreamWaitEvent");
      return true;
    }
  }
  wait_layer<<<1, 32, 0, s>>>(control_dev_, layer, captured ? 0 : epoch);
  check(cudaGetLastError(), "wait kernel launch");
  return true;
}

void Device::sync_scatters() {
  Guard g(ordinal_);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "the scatter stream");
}

void* Device::record(void* stream, unsigned flags) {
  Guard g(ordinal_);
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, flags), "cudaEventCreate");
  if (cudaError_t rc = cudaEventRecord(e, static_cast<cudaStream_t>(stream)); rc != cudaSuccess) {
    cudaEventDestroy(e);
    check(rc, "cudaEventRecord");
  }
  return e;
}

void* Device::record_event(void* stream) { return record(stream, cudaEventBlockingSync | cudaEventDisableTiming); }

void Device::sync_event(void* event) {
  Guard g(ordinal_);
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "the engine's work before a layer it declared ready");
}

void* Device::record_reached(void* stream) {
  // Not while the stream captures (the event would never fire), nor when CUDA cannot tell.
  if (capturing(static_cast<cudaStream_t>(stream)).value_or(true)) return nullptr;
  return record(stream, cudaEventDisableTiming);
}

bool Device::event_done(void* event) noexcept {
  QuietGuard g(ordinal_);
  // Relaxed: the query must not disturb an engine's graph capture on another thread.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (rc != cudaSuccess && rc != cudaErrorNotReady) cudaGetLastError();
  cudaThreadExchangeStreamCaptureMode(&mode);
  return rc == cudaSuccess;
}

void Device::destroy_event(void* event) noexcept {
  QuietGuard g(ordinal_);
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

bool Device::owns(const void* p) const {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) && a.device == ordinal_;
}

uint64_t Device::pin(void* p, size_t bytes) {
  Guard g(ordinal_);
  check(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable), "cudaHostRegister");
  void* d = nullptr;
  check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer");
  return reinterpret_cast<uint64_t>(d);
}

void Device::unpin(void* p) {
  cudaSetDevice(ordinal_);
  cudaHostUnregister(p);
}

void* Device::host_alloc(size_t bytes, uint64_t* device_address) {
  {
    std::lock_guard lock(pinned_mu_);
    for (Pinned& b : pinned_)
      if (b.free && b.bytes >= bytes) {
        b.free = false;
        *device_address = b.device;
        return b.host;
      }
  }
  Guard g(ordinal_);
  size_t rounded = 4096;
  while (rounded < bytes) rounded *= 2;
  void* p = nullptr;
  check(cudaHostAlloc(&p, rounded, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  void* d = nullptr;
  check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer");
  *device_address = reinterpret_cast<uint64_t>(d);
  std::lock_guard lock(pinned_mu_);
  pinned_.push_back(Pinned{p, *device_address, rounded, false});
  return p;
}

void Device::host_free(void* p) {
  std::lock_guard lock(pinned_mu_);
  for (Pinned& b : pinned_)
    if (b.host == p) b.free = true;
}

void Device::set_staging(uint64_t bytes, uint64_t extent) {
  if (!bytes) return;
  TUTTI_EXPECT(bytes >= 2 * extent, "option device_staging: " + std::to_string(bytes) +
                                        " bytes hold less than one chunk-layer (" + std::to_string(extent) +
                                        " bytes) for loads and one for stores; 0 turns device staging off");
  Guard g(ordinal_);
  // The copies read the chunk list and the chunks' staging addresses on the host: mapped host
  // memory must sit at its host address on the device (UVA; true on x86-64 Linux). If not,
  // the copy kernels read host memory themselves, as with device_staging=0.
  int uva = 0, same = 0;
  check(cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, ordinal_), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&same, cudaDevAttrCanUseHostPointerForRegisteredMem, ordinal_), "cudaDeviceGetAttribute");
  if (!uva || !same) return;
  for (Stage* st : {&load_stage_, &store_stage_}) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes / 2), "cudaMalloc (device_staging)");
    st->base = static_cast<char*>(p);
    st->chunks = bytes / 2 / extent;
  }
}

void Device::scatter(const CopyLayout& l, void* k, void* v, uint64_t chunks, size_t n, uint64_t ids,
                     void (*done)(void*), void* arg, uint64_t status, uint64_t terms, bool from_host,
                     void* freed) {
  Guard g(ordinal_);
  auto s = static_cast<cudaStream_t>(stream_);
  auto* list = reinterpret_cast<const ChunkCopy*>(chunks);
  auto* st = reinterpret_cast<const int32_t*>(status);
  auto* sums = reinterpret_cast<uint64_t*>(terms);
  try {
    if (n && from_host && load_stage_.base) {
      // Through the copy engines into device staging, then an HBM-to-HBM scatter: the scatter
      // kernel's warps no longer sit on PCIe reads while the engine's kernels want the SMs.
      // Calls from several I/O threads share the staging: one at a time. The halves take turns:
      // a half's DMA waits for the scatter that last emptied it, its scatter for its DMA.
      const uint64_t extent = l.sides * l.v_offset;
      const size_t per_half = std::max<size_t>(1, load_stage_.chunks / 2);
      auto dma = static_cast<cudaStream_t>(dma_stream_);
      std::lock_guard lock(load_stage_.mu);
      try {
        for (size_t i = 0; i < n; i += per_half) {
          const size_t m = std::min(n - i, per_half);
          const unsigned h = load_stage_.chunks >= 2 ? (next_half_ ^= 1) : 0;
          char* stage = load_stage_.base + h * per_half * extent;
          auto filled = static_cast<cudaEvent_t>(half_filled_[h]), emptied = static_cast<cudaEvent_t>(half_emptied_[h]);
          check(cudaStreamWaitEvent(dma, emptied, 0), "cudaStreamWaitEvent");
          copy_stage(dma, stage, list + i, st ? st + i : nullptr, m, extent, true);
          check(cudaEventRecord(filled, dma), "cudaEventRecord");
          check(cudaStreamWaitEvent(s, filled, 0), "cudaStreamWaitEvent");
          launch<true>(s, l, static_cast<char*>(k), static_cast<char*>(v), list + i, m,
                       reinterpret_cast<const int32_t*>(ids), st ? st + i : nullptr, sums ? sums + i : nullptr, stage);
          check(cudaEventRecord(emptied, s), "cudaEventRecord");
        }
      } catch (...) {
        // A kernel queued before the failure may still read a half whose emptied event was not
        // recorded after it: the next caller's DMA must not refill it before it ran.
        cudaStreamSynchronize(dma);
        cudaStreamSynchronize(s);
        throw;
      }
    } else if (n) {
      launch<true>(s, l, static_cast<char*>(k), static_cast<char*>(v), list, n,
                   reinterpret_cast<const int32_t*>(ids), st, sums);
    }
    check(cudaLaunchHostFunc(s, done, arg), "cudaLaunchHostFunc");
  } catch (...) {
    // The caller then fails the layer and frees its staging: nothing queued may still use it
    // (every DMA queued is ahead of a wait of stream_'s, or the staged branch waited for it).
    cudaStreamSynchronize(s);
    throw;
  }
  // done(arg) is queued: a throw now would have the caller fail a layer that lands. Without
  // the event, wait here instead: then nothing of the layer is in flight.
  if (freed && cudaEventRecord(static_cast<cudaEvent_t>(freed), s) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamSynchronize(s);
  }
}

void Device::layer_terms_sync(const CopyLayout& l, const void* k, const void* v, uint64_t chunks, size_t n,
                              uint64_t ids, uint64_t terms) {
  if (!n) return;
  Guard g(ordinal_);
  cudaStream_t s = thread_stream(ordinal_);
  launch_terms(s, l, static_cast<const char*>(k), static_cast<const char*>(v),
               reinterpret_cast<const ChunkCopy*>(chunks), n, reinterpret_cast<const int32_t*>(ids), nullptr,
               reinterpret_cast<uint64_t*>(terms));
  check(cudaStreamSynchronize(s), "checksum kernel");
}

void Device::page_hashes(const void* pages, size_t n, uint64_t* out) {
  Guard g(ordinal_);
  cudaStream_t s = thread_stream(ordinal_);
  page_hash_kernel<<<static_cast<unsigned>(n), 32, 0, s>>>(static_cast<const uint4*>(pages), out);
  check(cudaGetLastError(), "checksum kernel launch");
  check(cudaStreamSynchronize(s), "checksum kernel");
}

void Device::copy_sync(void* dst, const void* src, size_t bytes) {
  Guard g(ordinal_);
  cudaStream_t s = thread_stream(ordinal_);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void Device::gather(const CopyLayout& l, const void* k, const void* v, uint64_t chunks, size_t n, uint64_t ids,
                    uint64_t terms) {
  if (!n) return;
  Guard g(ordinal_);
  auto s = static_cast<cudaStream_t>(gather_stream_);
  auto* kk = const_cast<char*>(static_cast<const char*>(k));
  auto* vv = const_cast<char*>(static_cast<const char*>(v));
  auto* list = reinterpret_cast<const ChunkCopy*>(chunks);
  const auto* id = reinterpret_cast<const int32_t*>(ids);
  auto* out = reinterpret_cast<uint64_t*>(terms);
  // The checksum kernel reads the blocks, and the staging the gather just wrote for the tokens
  // a chunk's span leaves out (zeros), so it runs after the gather on the same stream.
  if (store_stage_.base) {  // blocks -> device staging at HBM speed, then DMA out
    std::lock_guard lock(store_stage_.mu);
    for (size_t i = 0; i < n; i += store_stage_.chunks) {
      const size_t m = std::min(n - i, store_stage_.chunks);
      launch<false>(s, l, kk, vv, list + i, m, id, nullptr, nullptr, store_stage_.base);
      if (out) launch_terms(s, l, kk, vv, list + i, m, id, nullptr, out + i, store_stage_.base);
      copy_stage(s, store_stage_.base, list + i, nullptr, m, l.sides * l.v_offset, false);
    }
  } else {
    launch<false>(s, l, kk, vv, list, n, id);
    if (out) launch_terms(s, l, kk, vv, list, n, id, nullptr, out);
  }
  auto e = static_cast<cudaEvent_t>(gathered_);
  check(cudaEventRecord(e, s), "cudaEventRecord");
  check(cudaEventSynchronize(e), "gather");
}

void* alloc(int ordinal, size_t bytes) {
  Guard g(ordinal);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void free(void* p) { cudaFree(p); }
void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
}
void fill_zero(void* dst, size_t bytes) {
  check(cudaMemset(dst, 0, bytes), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // done before tutti's streams touch it
}

double h2d_gbps(int ordinal, uint64_t bytes, uint64_t piece, unsigned streams, uint64_t rows) {
  Guard g(ordinal);
  void* host = nullptr;
  void* dev = nullptr;
  std::vector<cudaStream_t> ss;
  auto release = [&] {
    for (cudaStream_t s : ss) cudaStreamDestroy(s);
    cudaFree(dev);
    cudaFreeHost(host);
  };
  double best = 0;
  try {
    const uint64_t spread = rows > 1 ? 2 : 1;  // rows: every other piece of twice the memory
    check(cudaHostAlloc(&host, spread * bytes, cudaHostAllocPortable), "cudaHostAlloc");
    std::memset(host, 0x5A, spread * bytes);
    check(cudaMalloc(&dev, bytes), "cudaMalloc");
    for (unsigned i = 0; i < streams; ++i) {
      cudaStream_t s;
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      ss.push_back(s);
    }
    for (int run = 0; run < 4; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      if (rows > 1) {
        TUTTI_EXPECT(bytes % piece == 0, "h2d_gbps: rows of pieces need bytes a multiple of the piece");
        const uint64_t group = piece * rows;
        for (uint64_t o = 0, i = 0; o < bytes; o += group, ++i)
          check(cudaMemcpy2DAsync(static_cast<char*>(dev) + o, piece, static_cast<const char*>(host) + 2 * o, 2 * piece,
                                  piece, std::min(group, bytes - o) / piece, cudaMemcpyHostToDevice, ss[i % ss.size()]),
                "cudaMemcpy2DAsync");
      } else {
        for (uint64_t o = 0, i = 0; o < bytes; o += piece, ++i)
          check(cudaMemcpyAsync(static_cast<char*>(dev) + o, static_cast<const char*>(host) + o,
                                std::min(piece, bytes - o), cudaMemcpyHostToDevice, ss[i % ss.size()]),
                "cudaMemcpyAsync");
      }
      for (cudaStream_t s : ss) check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (run) best = std::max(best, static_cast<double>(bytes) / secs / 1e9);
    }
  } catch (...) {
    release();
    throw;
  }
  release();
  return best;
}

}  // namespace tutti::gpu
