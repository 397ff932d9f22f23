// SPDX-License-Identifier: Apache-2.0
// The paths into CUDA memory that CPU I/O or the mapped pool feed: staged-cuda, per-block (in
// CUDA memory) and mapped-cuda. A load is checked where its bytes land: by the checksum kernel,
// right after the copy kernel on its stream (per-block: once the layer's copies are all done).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/checksum.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "datapath/dram.hpp"
#include "datapath/path_run.hpp"

namespace tutti {

DeviceBatch::DeviceBatch(gpu::Device& dev, const KvBinding& kv, std::deque<PathChunk>& chunks, uint32_t layers,
                         bool with_status, bool with_terms)
    : dev_(dev), n_(chunks.size()) {
  const size_t bpc = kv.blocks_per_chunk();
  const size_t ids_bytes = align_up(n_ * bpc * sizeof(int32_t), 16);
  const size_t copies_bytes = size_t{layers} * n_ * sizeof(gpu::ChunkCopy);
  const size_t status_bytes = with_status ? align_up(size_t{layers} * n_ * sizeof(int32_t), 16) : 0;
  const size_t terms_bytes = with_terms ? size_t{layers} * n_ * sizeof(uint64_t) : 0;
  auto* base = static_cast<std::byte*>(dev.host_alloc(ids_bytes + copies_bytes + status_bytes + terms_bytes, &dev_base_));
  pinned_ = base;
  copies_ = reinterpret_cast<gpu::ChunkCopy*>(base + ids_bytes);
  copies_dev_ = dev_base_ + ids_bytes;
  status_ = reinterpret_cast<int32_t*>(base + ids_bytes + copies_bytes);
  status_dev_ = dev_base_ + ids_bytes + copies_bytes;
  if (with_terms) {
    terms_ = reinterpret_cast<uint64_t*>(base + ids_bytes + copies_bytes + status_bytes);
    terms_dev_ = dev_base_ + ids_bytes + copies_bytes + status_bytes;
  }
  auto* ids = reinterpret_cast<int32_t*>(base);  // the chunks' block ids, where the kernels read them
  for (size_t i = 0; i < n_; ++i) {  // (past a chunk's last token the table may end)
    chunks[i].first_block = static_cast<uint32_t>(i * bpc);
    const size_t used = std::min<size_t>(kv.blocks_of(chunks[i].span), bpc);
    std::copy_n(chunks[i].blocks, used, ids + i * bpc);
    std::fill_n(ids + i * bpc + used, bpc - used, 0);
  }
}

DeviceBatch::~DeviceBatch() { dev_.host_free(pinned_); }

namespace {

// ---- staged-cuda: CPU or cuFile I/O into staging, one copy kernel per wave -----------------

class StagedCudaRun final : public IoRun {
 public:
  StagedCudaRun(const PathParts& parts, bool load, std::deque<PathChunk>& chunks, PathSink& sink)
      : IoRun(parts, load, chunks, sink, {{0, parts.kv->shape().layer_bytes()}}, parts.staging, *parts.backend),
        mem_(*parts.device, *parts.kv, chunks, parts.kv->shape().layers, false, verify_ || (!load && parts.gpu_sums)),
        scattered_(size_t{parts.kv->shape().layers} * chunks.size()) {}

  // On a CUDA thread, once the wave's scatter (and checksum) kernels have run over its first n
  // ops' chunks.
  void landed(Wave& w, uint32_t n) {
    for (uint32_t j = 0; j < w.count; ++j) staging_->release(ops(w.layer)[w.first + j].stage);
    if (verify_) {
      const uint64_t* terms = mem_.terms(w.layer) + w.first;
      for (uint32_t j = 0; j < n; ++j) check_terms(scattered(w)[j], w.layer, terms[j]);
    }
    wave_landed(w.layer);
  }

 private:
  struct LandedWave {  // the CUDA host callback's argument
    StagedCudaRun* run;
    Wave* wave;
    uint32_t n;
    static void call(void* arg) {
      auto* c = static_cast<LandedWave*>(arg);
      StagedCudaRun* run = c->run;
      Wave& w = *c->wave;
      const uint32_t n = c->n;
      delete c;
      run->landed(w, n);
    }
  };

  // The chunk of each of the wave's copies, in order (one op per chunk-layer, so a wave's
  // copies fit in the layer's from its first op on).
  uint32_t* scattered(const Wave& w) { return scattered_.data() + size_t{w.layer} * chunks_.size() + w.first; }

  void prepare(LayerOp& op) override {
    if (!op.write) return;
    zero_padding(op.buf);  // the gather kernel filled the rest (and with gpu_sums hashed it)
    if (!p_.gpu_sums) chunks_[op.item].sums[op.layer] = layer_sum(op.buf, op.length);
  }
  int64_t read_over(LayerOp&, int64_t res) override { return res; }  // checked in the blocks
  bool holds_staging() const override { return true; }

  // A store: blocks -> staging for a group of ops, before their writes are submitted.
  void before_submit(std::span<IoOp* const> group, size_t first) override {
    const uint32_t layer = static_cast<LayerOp*>(group[0])->layer;
    gpu::ChunkCopy* copies = mem_.copies(layer) + first;
    for (size_t i = 0; i < group.size(); ++i) {
      auto* op = static_cast<LayerOp*>(group[i]);
      copies[i] = gpu::ChunkCopy{staging_->device_address(op->stage), chunks_[op->item].first_block, chunks_[op->item].span};
    }
    try {
      p_.device->gather(kv_.copy_layout(), kv_.k(layer), kv_.v(layer),
                        mem_.copies_dev(layer) + first * sizeof(gpu::ChunkCopy), group.size(), mem_.ids(),
                        p_.gpu_sums ? mem_.terms_dev(layer) + first * sizeof(uint64_t) : 0);
      for (size_t i = 0; i < group.size() && p_.gpu_sums; ++i)
        chunks_[static_cast<LayerOp*>(group[i])->item].sums[layer] =
            layer_sum_of_terms(mem_.terms(layer)[first + i], kv_.shape().layer_bytes());
    } catch (const Error& e) {
      for (IoOp* op : group) fail(static_cast<LayerOp*>(op)->item, layer, e.code(), e.what());
    }
  }

  // A load's wave is in staging: one kernel scatters it into the blocks.
  void wave_over(Wave& w) override {
    gpu::ChunkCopy* copies = mem_.copies(w.layer) + w.first;
    uint32_t* items = scattered(w);
    uint32_t n = 0;
    for (uint32_t j = 0; j < w.count; ++j) {
      const LayerOp& op = ops(w.layer)[w.first + j];
      if (failed(op.item)) continue;
      copies[n] = gpu::ChunkCopy{staging_->device_address(op.stage), chunks_[op.item].first_block, chunks_[op.item].span};
      items[n++] = op.item;
    }
    const uint64_t terms = mem_.terms_dev(w.layer);
    // A load given up on (load_timeout_ms) queues no copy once its fence is closed; the copies
    // queued before, the give-up waits for.
    const Fence::Pass pass(sink_.fence());
    if (!pass.open()) n = 0;
    auto* arg = new LandedWave{this, &w, n};
    hold_landing(w.layer);  // the callback may run before this reports the wave queued
    try {
      p_.device->scatter(kv_.copy_layout(), kv_.k(w.layer), kv_.v(w.layer),
                         mem_.copies_dev(w.layer) + uint64_t{w.first} * sizeof(gpu::ChunkCopy), n, mem_.ids(),
                         LandedWave::call, arg, 0, terms ? terms + uint64_t{w.first} * sizeof(uint64_t) : 0,
                         !staging_->in_device_memory());
    } catch (const Error& e) {
      for (uint32_t j = 0; j < n; ++j) fail(items[j], w.layer, e.code(), e.what());
      arg->n = 0;
      LandedWave::call(arg);
    }
    wave_queued(w.layer);
    wave_landed(w.layer);
  }

  DeviceBatch mem_;
  std::vector<uint32_t> scattered_;  // per layer and op: the chunk of each copy
};

// ---- per-block in CUDA memory: one copy and one I/O per block's K or V ---------------------

class PerBlockCudaRun final : public IoRun {
 public:
  PerBlockCudaRun(const PathParts& parts, bool load, std::deque<PathChunk>& chunks, PathSink& sink,
                  std::vector<std::pair<uint64_t, uint64_t>> ranges)
      : IoRun(parts, load, chunks, sink, std::move(ranges), parts.staging, *parts.backend),
        mem_(*parts.device, *parts.kv, chunks, parts.kv->shape().layers, false, verify_) {}

 private:
  // Where op's block lies: [lo, hi) is one block's K or V, whole in the block (checked at
  // registration).
  std::byte* block_address(const LayerOp& op) const {
    const Shape& s = kv_.shape();
    const bool is_v = op.lo >= s.v_offset();
    const uint64_t u = (op.lo - (is_v ? s.v_offset() : 0)) / (op.hi - op.lo);
    return (is_v ? kv_.v(op.layer) : kv_.k(op.layer)) +
           uint64_t(chunks_[op.item].blocks[u]) * kv_.copy_layout().block_stride;
  }

  // A commit record needs the checksum of the whole extent: the chunk-layer is copied out once
  // more to compute it.
  uint64_t extent_checksum_on_device(uint32_t layer, const int32_t* blocks) const {
    const Shape& s = kv_.shape();
    const uint64_t bb = kv_.copy_layout().run_bytes;  // one block's K (or V)
    thread_local std::vector<std::byte> extent;
    extent.assign(s.layer_bytes(), std::byte{0});
    for (uint32_t u = 0; u < kv_.blocks_per_chunk(); ++u) {
      const uint64_t at = uint64_t(blocks[u]) * kv_.copy_layout().block_stride;
      p_.device->copy_sync(extent.data() + u * bb, kv_.k(layer) + at, bb);
      if (!s.k_only) p_.device->copy_sync(extent.data() + s.v_offset() + u * bb, kv_.v(layer) + at, bb);
    }
    return layer_sum(extent.data(), extent.size());
  }

  // On an I/O thread: a failed copy fails the chunk (its write goes on, but it is never
  // committed) instead of escaping the thread.
  void prepare(LayerOp& op) override {
    if (!op.write) return;
    try {
      p_.device->copy_sync(op.buf, block_address(op), op.length);
      if (op.lo == 0) chunks_[op.item].sums[op.layer] = extent_checksum_on_device(op.layer, chunks_[op.item].blocks);
    } catch (const Error& e) {
      fail(op.item, op.layer, e.code(), e.what());
    }
  }

  int64_t read_over(LayerOp& op, int64_t res) override {
    const Fence::Pass pass(sink_.fence());  // a load given up on: no copy once it is closed
    if (!pass.open()) return -ETIMEDOUT;
    try {
      p_.device->copy_sync(block_address(op), op.stage.data, op.length);
    } catch (const Error&) {
      return -EIO;
    }
    return res;
  }

  // No single copy sees a chunk-layer whole: the checksum kernel checks it in the blocks.
  void io_over(uint32_t layer) override {
    if (verify_) {
      gpu::ChunkCopy* copies = mem_.copies(layer);
      std::vector<uint32_t> checked;
      for (uint32_t i = 0; i < chunks_.size(); ++i)
        if (!failed(i)) {
          copies[checked.size()] = gpu::ChunkCopy{0, chunks_[i].first_block, chunks_[i].span};
          checked.push_back(i);
        }
      try {
        p_.device->layer_terms_sync(kv_.copy_layout(), kv_.k(layer), kv_.v(layer), mem_.copies_dev(layer), checked.size(),
                                    mem_.ids(), mem_.terms_dev(layer));
        for (size_t j = 0; j < checked.size(); ++j) check_terms(checked[j], layer, mem_.terms(layer)[j]);
      } catch (const Error& e) {
        for (uint32_t i : checked) fail(i, layer, e.code(), e.what());
      }
    }
    sink_.layer_landed(layer);
  }

  DeviceBatch mem_;
};

// ---- mapped-cuda: copy kernels between the mapped pool (dram) and the blocks ---------------

class MappedCudaRun final : public RunBase {
 public:
  MappedCudaRun(const PathParts& parts, bool load, std::deque<PathChunk>& chunks, PathSink& sink)
      : RunBase(parts, load, chunks, sink),
        mem_(*parts.device, *parts.kv, chunks, parts.kv->shape().layers, true, verify_ || (!load && parts.gpu_sums)),
        landing_(std::make_unique<std::atomic<uint32_t>[]>(parts.kv->shape().layers)) {}

  void issue(uint32_t layer) override {
    const Geometry& g = p_.pool->geometry();
    const DramPool& dram = *p_.dram;
    gpu::ChunkCopy* copies = mem_.copies(layer);
    int32_t* status = mem_.status(layer);
    const size_t n = chunks_.size();
    for (uint32_t i = 0; i < n; ++i) {
      const Extent e = g.layer_extent(chunks_[i].slot, layer);
      copies[i] = gpu::ChunkCopy{dram.device(e.file, e.offset), chunks_[i].first_block, chunks_[i].span};
      status[i] = chunks_[i].error.load();
    }
    if (load_) {
      // The layer lands once its kernels' callback has run and this call is done with the run.
      landing_[layer].store(2);
      auto* arg = new LandedCall<MappedCudaRun>{this, layer};
      const Fence::Pass pass(sink_.fence());  // a load given up on: no copy once it is closed
      if (!pass.open())
        for (size_t i = 0; i < n; ++i) status[i] = TUTTI_EIO;
      try {
        p_.device->scatter(kv_.copy_layout(), kv_.k(layer), kv_.v(layer), mem_.copies_dev(layer), n, mem_.ids(),
                           LandedCall<MappedCudaRun>::call, arg, mem_.status_dev(layer), mem_.terms_dev(layer), true);
      } catch (const Error& e) {
        for (size_t i = 0; i < n; ++i) status[i] = e.code();
        LandedCall<MappedCudaRun>::call(arg);
      }
      sink_.layer_queued(layer);
      return release(layer);
    }
    // A failed chunk's slot is not written: its tombstone may not have reached the disk, and a
    // record of the chunk that had the slot before must not come back over other bytes.
    std::vector<uint32_t> live;
    for (uint32_t i = 0; i < n; ++i)
      if (!failed(i)) copies[live.size()] = copies[i], live.push_back(i);
    try {
      p_.device->gather(kv_.copy_layout(), kv_.k(layer), kv_.v(layer), mem_.copies_dev(layer), live.size(),
                        mem_.ids(), p_.gpu_sums ? mem_.terms_dev(layer) : 0);
    } catch (const Error& e) {
      for (uint32_t i : live) fail(i, layer, e.code(), e.what());
      return sink_.layer_landed(layer);
    }
    // The padding after K and after V is hashed as zeros: the pool must hold zeros there too.
    // Touching the extent also finds a file truncated under the mapping.
    const Shape& s = kv_.shape();
    const uint64_t pad = s.v_offset() - s.kv_bytes();
    for (size_t j = 0; j < live.size(); ++j) {
      const uint32_t i = live[j];
      const Extent e = g.layer_extent(chunks_[i].slot, layer);
      std::byte* extent = dram.host(e.file, e.offset);
      uint64_t sum = 0;
      const bool ok = touch_mapped([&] {
        (void)*static_cast<volatile std::byte*>(extent);
        for (uint32_t side = 0; side < s.sides(); ++side) std::memset(extent + side * s.v_offset() + s.kv_bytes(), 0, pad);
        if (!p_.gpu_sums) sum = layer_sum(extent, s.layer_bytes());
      });
      if (!ok) fail(i, layer, TUTTI_EIO, "write to " + where(i, layer) + ": the file was truncated under its mapping (by another process?)");
      chunks_[i].sums[layer] = p_.gpu_sums ? layer_sum_of_terms(mem_.terms(layer)[j], s.layer_bytes()) : sum;
    }
    p_.counters->bytes_written += live.size() * s.layer_bytes();
    sink_.layer_landed(layer);
  }

  // On a CUDA thread, once the layer's copy (and checksum) kernels have run.
  void landed(uint32_t layer) {
    check_layer(layer, mem_.status(layer), verify_ ? mem_.terms(layer) : nullptr, false);
    release(layer);
  }

 private:
  void release(uint32_t layer) {
    if (landing_[layer].fetch_sub(1) == 1) sink_.layer_landed(layer);
  }

  DeviceBatch mem_;
  std::unique_ptr<std::atomic<uint32_t>[]> landing_;  // per layer, while loading: 2, 1, 0 = landed
};

class CudaPath final : public LayerPath {
 public:
  enum Kind { kStaged, kPerBlock, kMapped };
  CudaPath(const PathParts& parts, Kind kind) : p_(parts), kind_(kind) {}
  const char* name() const override { return kind_ == kStaged ? "staged-cuda" : kind_ == kPerBlock ? "per-block" : "mapped-cuda"; }

  std::unique_ptr<PathRun> plan(bool load, std::deque<PathChunk>& chunks, PathSink& sink) override {
    if (kind_ == kMapped) return std::make_unique<MappedCudaRun>(p_, load, chunks, sink);
    if (kind_ == kStaged) return std::make_unique<StagedCudaRun>(p_, load, chunks, sink);
    return std::make_unique<PerBlockCudaRun>(p_, load, chunks, sink, per_block_ranges(*p_.kv));
  }

 private:
  const PathParts p_;
  const Kind kind_;
};

}  // namespace

std::unique_ptr<LayerPath> make_staged_cuda_path(const PathParts& parts) {
  return std::make_unique<CudaPath>(parts, CudaPath::kStaged);
}
std::unique_ptr<LayerPath> make_per_block_cuda_path(const PathParts& parts) {
  return std::make_unique<CudaPath>(parts, CudaPath::kPerBlock);
}
std::unique_ptr<LayerPath> make_mapped_cuda_path(const PathParts& parts) {
  return std::make_unique<CudaPath>(parts, CudaPath::kMapped);
}

}  // namespace tutti
