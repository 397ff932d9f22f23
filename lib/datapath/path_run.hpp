// SPDX-License-Identifier: Apache-2.0
// The pieces the layer paths share: a run's reporting (RunBase), the pinned memory the copy
// kernels of one batch read (DeviceBatch), and the CPU-I/O machinery of the host, staged-cuda
// and per-block paths (IoRun: one LayerOp per I/O, submitted in groups as staging allows).
#pragma once

#include <sys/uio.h>

#include <cerrno>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "datapath/layer_path.hpp"
#include "kernels/device.hpp"

namespace tutti {

// The tutti_error of a failed transfer's -errno (-EBADMSG: a checksum mismatch).
inline int code_of_errno(int64_t res) {
  return res == -ENOSPC ? TUTTI_ENOSPC : res == -EBADMSG ? TUTTI_ECORRUPT : TUTTI_EIO;
}

class RunBase : public PathRun {
 protected:
  RunBase(const PathParts& parts, bool load, std::deque<PathChunk>& chunks, PathSink& sink)
      : p_(parts), kv_(*parts.kv), load_(load), verify_(load && parts.verify), chunks_(chunks), sink_(sink) {}

  bool failed(uint32_t i) const { return chunks_[i].error.load(std::memory_order_relaxed) != 0; }
  void fail(uint32_t i, uint32_t layer, int code, const std::string& why = "");
  // Chunk i's layer does not match its commit record: it fails and the DRAM tier forgets it,
  // so the next load rereads the pool.
  void corrupt(uint32_t i, uint32_t layer, const std::string& where);
  void forget(uint32_t i, uint32_t layer);
  bool matches(uint32_t i, uint32_t layer, uint64_t sum) const { return chunks_[i].expected[layer] == sum; }
  // "<pool file> at offset N" for chunk i's layer, plus `past` bytes.
  std::string where(uint32_t i, uint32_t layer, uint64_t past = 0) const;
  // Chunk i's layer as it landed in the blocks, by its checksum (or, from the checksum kernel in
  // CUDA memory, its page terms): a mismatch fails the chunk.
  void check_landed(uint32_t i, uint32_t layer, uint64_t sum);
  void check_terms(uint32_t i, uint32_t layer, uint64_t terms);
  // A load's layer is in the blocks except for the chunks whose `status` is not 0 (a -errno
  // with `errnos`, else a tutti_error): those fail, the others are checked against `terms`
  // (one per chunk; null without verify) and count as read. Then the layer has landed.
  void land(uint32_t layer, const int32_t* status, const uint64_t* terms, bool errnos);
  void check_layer(uint32_t layer, const int32_t* status, const uint64_t* terms, bool errnos);  // land's checks alone

  const PathParts p_;
  const KvBinding& kv_;
  const bool load_;
  const bool verify_;  // a load that checks checksums
  std::deque<PathChunk>& chunks_;
  PathSink& sink_;
};

// The per-block baseline's I/Os of a chunk-layer: one block's K or V each.
std::vector<std::pair<uint64_t, uint64_t>> per_block_ranges(const KvBinding& kv);

// The checksum (kernels/layer_sum.hpp) of a chunk-layer extent as it lies on disk, read from
// host-memory blocks (the tokens the chunk's span leaves out as zeros: a store's); and the sum
// of the terms of its pages in [lo, hi) (whole pages).
uint64_t extent_checksum(const KvBinding& kv, uint32_t layer, const PathChunk& c);
uint64_t extent_terms(const KvBinding& kv, uint32_t layer, const PathChunk& c, uint64_t lo, uint64_t hi);

// Pinned host memory the copy kernels of one batch read: the chunks' block ids, then per layer
// one ChunkCopy per chunk, a status per chunk (with_status) and checksum terms per chunk (loads
// with verify). Freed with the run, never in a CUDA callback.
class DeviceBatch {
 public:
  DeviceBatch(gpu::Device& dev, const KvBinding& kv, std::deque<PathChunk>& chunks, uint32_t layers, bool with_status,
              bool with_terms);
  ~DeviceBatch();
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  uint64_t ids() const { return dev_base_; }
  gpu::ChunkCopy* copies(uint32_t layer) const { return copies_ + size_t{layer} * n_; }
  uint64_t copies_dev(uint32_t layer) const { return copies_dev_ + size_t{layer} * n_ * sizeof(gpu::ChunkCopy); }
  int32_t* status(uint32_t layer) const { return status_ + size_t{layer} * n_; }
  uint64_t status_dev(uint32_t layer) const { return status_dev_ + size_t{layer} * n_ * sizeof(int32_t); }
  const uint64_t* terms(uint32_t layer) const { return terms_ + size_t{layer} * n_; }
  uint64_t terms_dev(uint32_t layer) const { return terms_ ? terms_dev_ + size_t{layer} * n_ * sizeof(uint64_t) : 0; }

 private:
  gpu::Device& dev_;
  size_t n_ = 0;
  void* pinned_ = nullptr;
  uint64_t dev_base_ = 0;
  gpu::ChunkCopy* copies_ = nullptr;
  uint64_t copies_dev_ = 0;
  int32_t* status_ = nullptr;
  uint64_t status_dev_ = 0;
  uint64_t* terms_ = nullptr;
  uint64_t terms_dev_ = 0;
};

// A callback through a void* that calls (run->*Method)(layer) once, then frees itself.
template <class Run, void (Run::*Method)(uint32_t)>
struct LayerCall {
  Run* run;
  uint32_t layer;
  static void call(void* arg) {
    auto* c = static_cast<LayerCall*>(arg);
    Run* run = c->run;
    const uint32_t layer = c->layer;
    delete c;
    (run->*Method)(layer);
  }
};

// A CUDA host callback that calls run->landed(layer), for the copy kernels' `done`.
template <class Run>
using LandedCall = LayerCall<Run, &Run::landed>;

class IoRun;

// A load that holds its staging until a copy kernel moved it on (IoRun::holds_staging) hands a
// layer to the kernel in waves: the ops submitted before staging ran out. A wave's kernel frees
// its buffers for the next, so a layer needs no more staging than one buffer.
struct Wave {
  Wave(uint32_t layer, uint32_t first) : layer(layer), first(first) {}
  const uint32_t layer;
  const uint32_t first;                 // its first op's index in the layer's ops
  uint32_t count = 0;                   // written by the issuer until the wave closes
  std::atomic<uint32_t> pending{1};     // ops not over, +1 until the wave closes
};

// One I/O of a run: object bytes [lo, hi) of one chunk's layer.
class LayerOp final : public IoOp {
 public:
  void prepare() override;
  void complete(int64_t res) override;

  IoRun* run = nullptr;
  uint32_t item = 0;
  uint32_t layer = 0;
  uint64_t lo = 0, hi = 0;
  Staging::Buffer stage;  // data == nullptr: straight to the blocks
  std::vector<iovec> iovs;
  Wave* wave = nullptr;   // a load that holds staging: the wave it belongs to
};

// Runs of the CPU producers. A subclass says how an op's bytes meet the blocks.
class IoRun : public RunBase {
 public:
  void issue(uint32_t layer) final;

 protected:
  // ranges: the object bytes of a chunk-layer that one I/O each moves. staging: null when
  // every I/O goes straight to the blocks (see staged()).
  IoRun(const PathParts& parts, bool load, std::deque<PathChunk>& chunks, PathSink& sink,
        std::vector<std::pair<uint64_t, uint64_t>> ranges, Staging* staging, Backend& backend);

  // On an I/O thread before the I/O: a store fills its staging, or the op gets its iovecs.
  virtual void prepare(LayerOp& op) = 0;
  // On an I/O thread after a whole read: check and move the bytes on; returns res, or -EBADMSG
  // for a checksum mismatch, or -errno.
  virtual int64_t read_over(LayerOp& op, int64_t res) = 0;
  // Whether chunk i's I/Os go through staging (else straight to the blocks).
  virtual bool staged(uint32_t i) const {
    (void)i;
    return staging_ != nullptr;
  }
  // Whether a load's staging stays held after its op (until its wave's copy kernel ran).
  virtual bool holds_staging() const { return false; }
  // A load that holds staging: every op of wave `w` is over. Queues its copies and ends with
  // wave_queued(w.layer) and, here or later (on a CUDA thread), wave_landed(w.layer).
  virtual void wave_over(Wave& w) {
    wave_queued(w.layer);
    wave_landed(w.layer);
  }
  // One of the layer's waves is queued; the last, once the layer's I/O is all over, reports the
  // layer queued (PathSink::layer_queued). Call it before that wave's wave_landed.
  void wave_queued(uint32_t layer);
  // One of the layer's waves is in the blocks; the last, once the layer's I/O is all over,
  // lands the layer.
  void wave_landed(uint32_t layer);
  // Keeps the layer from landing until the matching wave_landed: a wave_over that reports
  // after its kernel's callback may already have run.
  void hold_landing(uint32_t layer) { landing_[layer].fetch_add(1); }
  // A store's group of ops, before they are submitted (the gather kernel fills their staging).
  virtual void before_submit(std::span<IoOp* const> group, size_t first) {
    (void)group;
    (void)first;
  }
  // Every op of `layer` is over (without waves); ends with sink_.layer_landed(layer), here or
  // later.
  virtual void io_over(uint32_t layer) { sink_.layer_landed(layer); }

  // A store's padding after K and after V is checksummed: it must hold defined bytes.
  void zero_padding(std::byte* extent) const;
  std::vector<LayerOp>& ops(uint32_t layer) { return ops_[layer]; }
  Staging* const staging_;
  const std::vector<std::pair<uint64_t, uint64_t>> ranges_;

 private:
  friend class LayerOp;
  void op_done(LayerOp& op, int64_t res);
  void waves_over(uint32_t layer);  // the layer's I/O is over: the hold on both counts goes

  Backend& backend_;
  std::vector<std::vector<LayerOp>> ops_;             // per layer, filled when it is issued
  std::unique_ptr<std::atomic<uint32_t>[]> pending_;  // ops outstanding per layer
  std::unique_ptr<std::atomic<uint32_t>[]> landing_;  // with waves: waves not landed per layer, +1 until its I/O is over
  std::unique_ptr<std::atomic<uint32_t>[]> queuing_;  // with waves: waves not queued per layer, +1 until its I/O is over
  std::deque<Wave> waves_;                            // appended by the issuer; elements never move
};

}  // namespace tutti
