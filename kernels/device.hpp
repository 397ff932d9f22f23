// SPDX-License-Identifier: Apache-2.0
// The CUDA side of tutti, behind a CUDA-free interface: lib/ calls this, and a build without
// CUDA links device_stub.cpp instead of device.cu, whose calls fail with a clear reason.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <vector>

#include "kernels/copy_layout.hpp"
#include "kernels/layer_epochs.hpp"

namespace tutti::gpu {

// "" when a CUDA device is usable here, else why not (no CUDA in this build, no driver...).
std::string unavailable_reason();
int device_count();

// One chunk of a layer: its object bytes in (mapped, pinned) staging and its block ids.
struct ChunkCopy {
  uint64_t staging;     // device-visible address of the chunk-layer extent
  uint32_t first_block; // index into the batch's device block-id array
  ChunkSpan span;       // where the chunk starts in its first block; the tokens that move
};

// A CUDA device as one runtime uses it: an internal stream and pinned staging.
class Device {
 public:
  // Throws Error(EUNSUPPORTED) with the reason. `high_load_priority`: the streams of loads'
  // copies at the device's highest priority (option load_priority).
  explicit Device(int ordinal, bool high_load_priority = false);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int ordinal() const { return ordinal_; }
  int load_priority() const { return load_priority_; }  // a CUDA stream priority, for loads' streams
  // True if p is device memory of this device (or managed memory it can reach).
  bool owns(const void* p) const;
  // Pins host memory and maps it for the device; returns the device-visible address.
  uint64_t pin(void* p, size_t bytes);
  void unpin(void* p);

  // Stream-ordered layer waits. A control block in pinned, mapped host memory holds the epoch
  // of the newest load batch and, per layer, the epoch up to which every batch has landed it
  // (LayerEpochs). A second count per layer says up to which epoch every batch's copies of the
  // layer are landed or queued on tutti's stream, with an event recorded on that stream after
  // them. Outside graph capture the calling thread blocks until either count reaches the
  // waiting batch's epoch; if only the queued one did, the engine's stream waits for the
  // event (cudaStreamWaitEvent: work already queued, so the GPU never waits for work that is
  // not), and the engine's thread runs ahead while the copies run. Inside capture (or with
  // gpu_waits), a one-warp kernel on the engine's stream spins on ready[layer] instead, against
  // the newest epoch when captured, so a captured graph keeps working across batches. Either
  // way a wait is never early; only a captured one waits for batches newer than its own.
  //
  // Why not spin on the GPU always: the spinning kernel holds its stream, and the engine's
  // next kernel on that stream waits behind it in a hardware queue; streams share those
  // queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), so once tutti's copy stream shares one
  // with the engine's, the copy that would end the spin waits behind the engine's kernel: a
  // deadlock. On the H200 a transformers prefill from the disk pool hung so (docs/ttft.md).
  void set_layers(uint32_t layers);
  // `bytes` of device memory, half for loads and half for stores, that scatters and gathers
  // move host memory through with the copy engines (0: the kernels read host memory in place).
  // `extent` is one chunk-layer's bytes. Throws EINVAL when a half cannot hold one.
  void set_staging(uint64_t bytes, uint64_t extent);
  void begin_epoch(uint64_t epoch);              // a load batch is submitted
  void mark_ready(uint32_t layer, uint64_t epoch);  // no CUDA calls: callable in host callbacks
  // The batch's copies of the layer are all queued on the scatter stream (not in a host callback).
  void mark_queued(uint32_t layer, uint64_t epoch) noexcept;
  void set_gpu_waits(bool on) { gpu_waits_ = on; }  // option stream_wait=gpu
  // Waits for the batches up to `epoch`; inside graph capture, up to the newest when it runs.
  // With a timeout (a load under load_timeout_ms) the calling thread waits at most that long
  // for the layer to be in place or queued, whatever stream_wait says, and on time-out returns
  // false with nothing enqueued; a wait captured into a graph cannot time out (EUNSUPPORTED).
  bool enqueue_wait(void* stream, uint32_t layer, uint64_t epoch, std::chrono::milliseconds timeout = {});
  // Waits for every copy queued on the scatter stream (not from a host callback): a load given
  // up on has none of its bytes land after this.
  void sync_scatters();

  // Events on an engine's stream (stores by layer): recorded where the stream is now, waited
  // for by a sleeping thread (blocking sync, no spinning), destroyed by their owner.
  void* record_event(void* stream);
  void sync_event(void* event);
  void destroy_event(void* event) noexcept;
  // Where an engine's stream is now, for the scheduler to see how far its GPU got (event_done
  // asks without waiting); nullptr while the stream captures a graph (no event would fire).
  void* record_reached(void* stream);
  bool event_done(void* event) noexcept;

  // Pinned host memory the kernels read in place (a batch's descriptors and block ids): no
  // copies, no stream-ordered allocations, nothing that could meet an engine's graph capture.
  // Freed blocks are kept for reuse, so host_free makes no CUDA call (cudaFreeHost could wait
  // for an engine's kernels) and steady state allocates nothing.
  void* host_alloc(size_t bytes, uint64_t* device_address);
  void host_free(void* p);

  // Staging -> blocks for `n` chunks of one layer, then done(arg) on a CUDA thread. One launch
  // (from host memory with device staging: one DMA and one launch per group that fits it).
  // `chunks` and `ids` are device-visible addresses (host_alloc); `from_host`: the chunks'
  // staging addresses are mapped host memory (not HBM staging, as cuFile's).
  // A chunk whose int32 in `status` (device-visible, optional; read on the host too, when the
  // DMAs are queued, so final by then) is not 0 is left alone.
  // With `terms` (device-visible uint64_t[n], optional) a second kernel then checksums each
  // chunk-layer where it landed: terms[i] is the sum of its page terms (kernels/layer_sum.hpp).
  // `freed` (an event, optional) is recorded once done(arg) has run: the staging may take new
  // bytes then (gpu-uring's next reads wait for it on the GPU).
  void scatter(const CopyLayout& l, void* k, void* v, uint64_t chunks, size_t n, uint64_t ids,
               void (*done)(void*), void* arg, uint64_t status, uint64_t terms, bool from_host,
               void* freed = nullptr);
  // The checksum kernel alone, waited for: terms[i] for chunk i as the blocks hold it now.
  void layer_terms_sync(const CopyLayout& l, const void* k, const void* v, uint64_t chunks, size_t n, uint64_t ids,
                        uint64_t terms);
  // Tests: the GPU's page hash of n 4 KiB pages in device memory (out: device-visible).
  void page_hashes(const void* pages, size_t n, uint64_t* out);
  // One copy between host and device memory on the calling thread's own stream, waited for:
  // the per-block baseline's copy per block, as page-granular SSD tiers do it.
  void copy_sync(void* dst, const void* src, size_t bytes);
  // Blocks -> staging for `n` chunks of one layer; returns once the bytes are in staging. With
  // `terms` (device-visible), terms[i] receives chunk i's checksum terms, hashed on the GPU from
  // the same blocks (the CPU finishes them: layer_sum_of_terms), so a store's checksum costs
  // the CPU nothing.
  void gather(const CopyLayout& l, const void* k, const void* v, uint64_t chunks, size_t n, uint64_t ids,
              uint64_t terms = 0);

 private:
  void* record(void* stream, unsigned flags);  // a new event, recorded on `stream`
  int ordinal_;
  void* stream_ = nullptr;         // scatters (from I/O threads)
  void* gather_stream_ = nullptr;  // gathers (from the scheduler thread)
  void* gathered_ = nullptr;       // event the scheduler thread sleeps on (no spinning)
  struct Stage {
    char* base = nullptr;  // device memory; null: no device staging
    size_t chunks = 0;     // chunk-layers it holds
    std::mutex mu;         // callers enqueue their groups one at a time (one stream orders them)
  };
  Stage load_stage_, store_stage_;
  // Loads fill one half of their staging by DMA on a stream of their own while the scatter
  // empties the other on stream_ (with one half, the copy engine and the scatter took turns:
  // bulk loads from DRAM ran at 36 GB/s against 45 with the kernels reading host memory).
  // Per half, under load_stage_.mu: an event when its DMA is done, one when its scatter is.
  void* dma_stream_ = nullptr;
  void* half_filled_[2] = {};
  void* half_emptied_[2] = {};
  unsigned next_half_ = 0;
  struct Pinned {
    void* host;
    uint64_t device;
    size_t bytes;
    bool free;
  };
  std::mutex pinned_mu_;
  std::vector<Pinned> pinned_;
  uint64_t* control_ = nullptr;  // [0] newest epoch, [1 + l] epoch up to which layer l landed
  bool gpu_waits_ = false;
  int load_priority_ = 0;  // CUDA's default: the lowest
  std::mutex ready_mu_;  // host waits sleep on ready_cv_ until control_ moves
  std::condition_variable ready_cv_;
  uint64_t* control_dev_ = nullptr;
  std::unique_ptr<LayerEpochs> epochs_;
  std::unique_ptr<LayerEpochs> queued_epochs_;
  std::vector<uint64_t> queued_;      // per layer: the epoch up to which its copies are queued
  std::vector<void*> queued_events_;  // per layer: recorded on stream_ when queued_ moves
};

// Host memory pinned and mapped for a device for as long as this object lives.
class HostPin {
 public:
  HostPin() = default;
  HostPin(Device& dev, void* p, size_t bytes) : dev_(&dev), device_address_(dev.pin(p, bytes)), p_(p) {}
  ~HostPin() { reset(); }
  HostPin(HostPin&& o) noexcept : dev_(o.dev_), device_address_(o.device_address_), p_(o.p_) { o.p_ = nullptr; }
  HostPin& operator=(HostPin&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = o.dev_, device_address_ = o.device_address_, p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  uint64_t device_address() const { return device_address_; }
  void reset() {
    if (p_) dev_->unpin(p_);
    p_ = nullptr;
  }

 private:
  Device* dev_ = nullptr;
  uint64_t device_address_ = 0;
  void* p_ = nullptr;
};

// Helpers for tests and the bench (device memory they own).
void* alloc(int ordinal, size_t bytes);
void free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void fill_zero(void* dst, size_t bytes);
// The bench's raw figure for host memory into HBM: `bytes` of pinned host memory copied into
// device memory in pieces of `piece` bytes, handed round-robin to `streams` streams; GB/s, the
// best of three runs after one to warm up. With `rows` > 1 the pieces lie one piece apart in
// host memory (a layer's chunk-layers of neighbouring slots lie a slot apart in a pool) and
// each copy moves `rows` of them at once (cudaMemcpy2DAsync) into contiguous memory; `bytes`
// is then a multiple of `piece`.
double h2d_gbps(int ordinal, uint64_t bytes, uint64_t piece, unsigned streams, uint64_t rows = 1);

}  // namespace tutti::gpu
