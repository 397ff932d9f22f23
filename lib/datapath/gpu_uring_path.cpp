// SPDX-License-Identifier: Apache-2.0
// gpu-uring loads: per layer, one launch on the GPU writes the layer's io_uring submissions
// and polls their completions (or leaves them to gpu-uring's copier thread); once they are
// over, the copier thread queues the copies of what landed into the blocks. The CPU builds no
// I/O.
#include <algorithm>
#include <atomic>
#include <memory>
#include <new>

#include "common/error.hpp"
#include "common/units.hpp"
#include "datapath/gpu_uring.hpp"
#include "datapath/path_run.hpp"

namespace tutti {

namespace {

class GpuUringRun final : public RunBase {
 public:
  GpuUringRun(const PathParts& parts, std::deque<PathChunk>& chunks, PathSink& sink)
      : RunBase(parts, true, chunks, sink),
        mem_(*parts.device, *parts.kv, chunks, parts.kv->shape().layers, false, verify_),
        landing_(std::make_unique<std::atomic<uint32_t>[]>(parts.kv->shape().layers)) {
    GpuUring& gu = *p_.gpu_uring;
    Staging& staging = *p_.staging;
    const size_t n = chunks_.size();
    TUTTI_EXPECT(n <= gu.max_chunks(), "backend gpu-uring reads at most " + std::to_string(gu.max_chunks()) +
                                           " chunks per layer; this batch has " + std::to_string(n));
    TUTTI_EXPECT(n <= staging.count(), "a load into CUDA memory stages a whole layer: " + std::to_string(n) +
                                           " chunks need staging >= " + std::to_string(n * staging.buffer_bytes()) +
                                           " bytes (option staging / TUTTI_STAGING)");
    // As many staging sets as the lookahead can use and the budget holds.
    const size_t sets = std::max<size_t>(
        1, std::min<size_t>({p_.lookahead, staging.count() / n, gpu::UringDriver::kMaxStreams}));
    const size_t chunks_bytes = align_up(n * sizeof(gpu::IoChunk), 16);
    const size_t set_bytes = align_up(n * (sizeof(gpu::IoTarget) + sizeof(gpu::ChunkCopy)) + n * sizeof(int32_t), 16);
    uint64_t dev = 0;
    pinned_ = p_.device->host_alloc(chunks_bytes + sets * set_bytes, &dev);
    auto* base = static_cast<std::byte*>(pinned_);
    auto* io = reinterpret_cast<gpu::IoChunk*>(base);
    const Geometry& g = p_.pool->geometry();
    for (size_t i = 0; i < n; ++i) {
      const Extent e = g.layer_extent(chunks_[i].slot, 0);
      io[i] = gpu::IoChunk{e.offset, e.file, p_.async_reads.at(e.file) ? 1u : 0u};
    }
    chunks_dev_ = dev;
    sets_.resize(sets);
    for (size_t k = 0; k < sets; ++k) {
      const size_t at = chunks_bytes + k * set_bytes;
      Set& set = sets_[k];
      set.targets = dev + at;
      set.copies = set.targets + n * sizeof(gpu::IoTarget);
      set.status = set.copies + n * sizeof(gpu::ChunkCopy);
      set.targets_host = reinterpret_cast<gpu::IoTarget*>(base + at);
      set.copies_host = reinterpret_cast<gpu::ChunkCopy*>(set.targets_host + n);
      set.status_host = reinterpret_cast<int32_t*>(set.copies_host + n);
    }
    // The staging of every set, for the whole batch, taken here on the submitting thread and
    // at once: taken layer by layer on the loader thread, a second batch's wait for buffers
    // the first holds would stop the only thread that issues the first's remaining layers.
    held_ = staging.acquire_n(sets * n);
    // In address order: a set's chunks then cross PCIe in one DMA per run of neighbours.
    std::sort(held_.begin(), held_.end(),
              [](const Staging::Buffer& a, const Staging::Buffer& b) { return a.data < b.data; });
    for (size_t k = 0; k < sets; ++k)
      for (size_t i = 0; i < n; ++i) {
        const Staging::Buffer& b = held_[k * n + i];
        sets_[k].targets_host[i] = gpu::IoTarget{reinterpret_cast<uint64_t>(b.data), static_cast<uint32_t>(b.region), 0};
        sets_[k].copies_host[i] = gpu::ChunkCopy{staging.device_address(b), chunks_[i].first_block, chunks_[i].span};
      }
  }

  ~GpuUringRun() override {
    release_staging();
    p_.device->host_free(pinned_);
  }

  void issue(uint32_t layer) override {
    const size_t n = chunks_.size();
    const uint32_t k = static_cast<uint32_t>(layer % sets_.size());
    const Set& set = sets_[k];
    gpu::LayerLoad a;
    a.layer = layer;
    a.n = static_cast<uint32_t>(n);
    a.layer_bytes = kv_.shape().layer_bytes();
    a.chunks = chunks_dev_;
    a.targets = set.targets;
    a.status = set.status;
    p_.counters->ios += n;
    // gpu-uring's copier calls copy(layer) once the reads are over (and reaped).
    using CopyCall = LayerCall<GpuUringRun, &GpuUringRun::copy>;
    auto* arg = new CopyCall{this, layer};
    try {
      p_.gpu_uring->load_layer(k, a, set.status_host, CopyCall::call, arg);
    } catch (const Error& e) {
      delete arg;
      for (uint32_t i = 0; i < n; ++i) fail(i, layer, e.code(), e.what());
      sink_.layer_landed(layer);
    }
  }

  // On gpu-uring's copier thread, once the layer's reads are over: its copies, as every load's
  // from host memory (through device staging by the copy engines, then an HBM-to-HBM scatter;
  // a copy kernel reading the staging in place would keep SMs waiting on PCIe while the
  // engine's kernels want them). The layer lands once they are queued and their callback ran.
  void copy(uint32_t layer) {
    const uint32_t k = static_cast<uint32_t>(layer % sets_.size());
    const Set& set = sets_[k];
    landing_[layer].store(2);
    LandedCall<GpuUringRun>* arg = nullptr;
    auto failed = [&](int code, const char* why) {
      delete arg;
      for (uint32_t i = 0; i < chunks_.size(); ++i) fail(i, layer, code, why);
      landing_[layer].store(0);
      sink_.layer_landed(layer);
    };
    try {
      arg = new LandedCall<GpuUringRun>{this, layer};
      p_.device->scatter(kv_.copy_layout(), kv_.k(layer), kv_.v(layer), set.copies, chunks_.size(), mem_.ids(),
                         LandedCall<GpuUringRun>::call, arg, set.status, mem_.terms_dev(layer), true,
                         p_.gpu_uring->freed(k));
    } catch (const Error& e) {
      return failed(e.code(), e.what());
    } catch (const std::bad_alloc&) {
      return failed(TUTTI_ENOMEM, "gpu-uring: out of memory queuing a layer's copies");
    }
    sink_.layer_queued(layer);
    release(layer);
  }

  void all_landed() override { release_staging(); }

  // On a CUDA thread, once the layer's good chunks are in the blocks. Layer L uses set L % sets
  // and the driver's stream of the same number, whose reads wait until the copies and this
  // callback of the layer before on it have run: a set is reused only after that.
  void landed(uint32_t layer) {
    check_layer(layer, sets_[layer % sets_.size()].status_host, verify_ ? mem_.terms(layer) : nullptr, true);
    release(layer);
  }

 private:
  void release(uint32_t layer) {
    if (landing_[layer].fetch_sub(1) == 1) sink_.layer_landed(layer);
  }

  void release_staging() {
    for (const Staging::Buffer& b : held_) p_.staging->release(b);
    held_.clear();
  }

  struct Set {
    uint64_t targets = 0, copies = 0, status = 0;  // device addresses
    gpu::IoTarget* targets_host = nullptr;        // the same memory, as the CPU sees it
    gpu::ChunkCopy* copies_host = nullptr;
    int32_t* status_host = nullptr;
  };
  DeviceBatch mem_;
  void* pinned_ = nullptr;  // the chunks' extents, then every set's descriptors
  uint64_t chunks_dev_ = 0;
  std::vector<Set> sets_;
  std::vector<Staging::Buffer> held_;  // every set's staging, for the whole batch
  std::unique_ptr<std::atomic<uint32_t>[]> landing_;  // per layer: 2, 1, 0 = landed
};

class GpuUringPath final : public LayerPath {
 public:
  explicit GpuUringPath(const PathParts& parts) : p_(parts) {}
  const char* name() const override { return "gpu-uring"; }
  std::unique_ptr<PathRun> plan(bool load, std::deque<PathChunk>& chunks, PathSink& sink) override {
    TUTTI_EXPECT_CODE(load, TUTTI_EINTERNAL, "gpu-uring moves loads only");
    return std::make_unique<GpuUringRun>(p_, chunks, sink);
  }

 private:
  const PathParts p_;
};

}  // namespace

std::unique_ptr<LayerPath> make_gpu_uring_path(const PathParts& parts) { return std::make_unique<GpuUringPath>(parts); }

}  // namespace tutti
