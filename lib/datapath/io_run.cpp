// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/checksum.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "datapath/dram_tier.hpp"
#include "datapath/path_run.hpp"
#include "scheduler/reads_first.hpp"

namespace tutti {

// ---- RunBase ------------------------------------------------------------------------------

void RunBase::fail(uint32_t i, uint32_t layer, int code, const std::string& why) {
  sink_.chunk_failed(i, layer, code, why);
}

void RunBase::corrupt(uint32_t i, uint32_t layer, const std::string& where) {
  fail(i, layer, TUTTI_ECORRUPT, "checksum mismatch: " + where + " holds other bytes than were stored");
  forget(i, layer);
}

void RunBase::forget(uint32_t i, uint32_t layer) {
  if (!p_.tier) return;
  const Extent e = p_.pool->geometry().layer_extent(chunks_[i].slot, layer);
  p_.tier->drop(e.file, e.offset, e.length);
}

std::string RunBase::where(uint32_t i, uint32_t layer, uint64_t past) const {
  const Extent e = p_.pool->geometry().layer_extent(chunks_[i].slot, layer);
  return p_.pool->file(e.file).path + " at offset " + std::to_string(e.offset + past);
}

void RunBase::check_landed(uint32_t i, uint32_t layer, uint64_t sum) {
  if (!matches(i, layer, sum)) corrupt(i, layer, "the chunk-layer in the blocks (read from " + where(i, layer) + ")");
}

void RunBase::check_terms(uint32_t i, uint32_t layer, uint64_t terms) {
  check_landed(i, layer, layer_sum_of_terms(terms, kv_.shape().layer_bytes()));
}

std::vector<std::pair<uint64_t, uint64_t>> per_block_ranges(const KvBinding& kv) {
  const Shape& s = kv.shape();
  const uint64_t bb = s.token_bytes() * kv.block_tokens();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (uint32_t side = 0; side < s.sides(); ++side)
    for (uint64_t o = 0; o < s.kv_bytes(); o += bb) ranges.emplace_back(side * s.v_offset() + o, side * s.v_offset() + o + bb);
  return ranges;
}

void RunBase::land(uint32_t layer, const int32_t* status, const uint64_t* terms, bool errnos) {
  check_layer(layer, status, terms, errnos);
  sink_.layer_landed(layer);
}

void RunBase::check_layer(uint32_t layer, const int32_t* status, const uint64_t* terms, bool errnos) {
  uint64_t ok = 0;
  for (uint32_t i = 0; i < chunks_.size(); ++i) {
    if (status[i] == 0) {
      if (terms) check_terms(i, layer, terms[i]);
      ++ok;
    } else if (!errnos) {
      fail(i, layer, status[i]);
    } else {
      fail(i, layer, code_of_errno(status[i]), "read of " + where(i, layer) + ": " + std::strerror(-status[i]));
    }
  }
  p_.counters->bytes_read += ok * kv_.shape().layer_bytes();
}

// K runs, zero padding up to V, V runs, zero padding to the end. A page that is one run is
// hashed in place, any other is assembled first.
uint64_t extent_terms(const KvBinding& kv, uint32_t layer, const PathChunk& c, uint64_t lo, uint64_t hi) {
  alignas(64) std::byte page[kIoAlign];
  uint64_t terms = 0;
  for (uint64_t p = lo; p < hi; p += kIoAlign) {
    const std::byte* whole = nullptr;
    bool zeroed = false;  // zeroed lazily: most pages of a direct layout are one run
    kv.for_each_run(layer, c.blocks, c.span, p, p + kIoAlign, [&](const MemRun& r) {
      if (r.len == kIoAlign) {
        whole = r.addr;
        return;
      }
      if (!zeroed) std::memset(page, 0, sizeof page), zeroed = true;
      std::memcpy(page + (r.obj_off - p), r.addr, r.len);
    });
    if (!whole && !zeroed) std::memset(page, 0, sizeof page);  // all padding
    terms += page_term(whole ? whole : page, p / kIoAlign);
  }
  return terms;
}

uint64_t extent_checksum(const KvBinding& kv, uint32_t layer, const PathChunk& c) {
  const uint64_t bytes = kv.shape().layer_bytes();
  return layer_sum_of_terms(extent_terms(kv, layer, c, 0, bytes), bytes);
}

// ---- IoRun --------------------------------------------------------------------------------

IoRun::IoRun(const PathParts& parts, bool load, std::deque<PathChunk>& chunks, PathSink& sink,
             std::vector<std::pair<uint64_t, uint64_t>> ranges, Staging* staging, Backend& backend)
    : RunBase(parts, load, chunks, sink),
      staging_(staging),
      ranges_(std::move(ranges)),
      backend_(backend),
      ops_(kv_.shape().layers),
      pending_(std::make_unique<std::atomic<uint32_t>[]>(kv_.shape().layers)),
      landing_(std::make_unique<std::atomic<uint32_t>[]>(kv_.shape().layers)),
      queuing_(std::make_unique<std::atomic<uint32_t>[]>(kv_.shape().layers)) {}

void IoRun::zero_padding(std::byte* extent) const {
  const Shape& s = kv_.shape();
  const uint64_t pad = s.v_offset() - s.kv_bytes();
  if (!pad) return;
  for (uint32_t side = 0; side < s.sides(); ++side) std::memset(extent + side * s.v_offset() + s.kv_bytes(), 0, pad);
}

void IoRun::issue(uint32_t layer) {
  const Geometry& g = p_.pool->geometry();
  std::vector<LayerOp>& ops = ops_[layer];
  ops.reserve(chunks_.size() * ranges_.size());
  for (uint32_t i = 0; i < chunks_.size(); ++i) {
    if (failed(i)) continue;
    const Extent e = g.layer_extent(chunks_[i].slot, layer);
    for (auto [lo, hi] : ranges_) {
      LayerOp& op = ops.emplace_back();
      op.run = this, op.item = i, op.layer = layer, op.lo = lo, op.hi = hi;
      op.file = e.file, op.offset = e.offset + lo, op.length = hi - lo, op.write = !load_;
    }
  }
  pending_[layer].store(static_cast<uint32_t>(ops.size()) + 1);  // +1 held until all are issued
  const bool waves = load_ && holds_staging();
  if (waves) landing_[layer].store(1), queuing_[layer].store(1);
  p_.counters->ios += ops.size();
  // Submit in groups; when staging runs out, hand over what is ready before blocking, so the
  // I/Os that will free buffers are already on their way (with waves: close the wave, whose
  // kernel frees its buffers once its I/Os are over).
  std::vector<IoOp*> group;
  group.reserve(64);
  size_t first = 0;  // index in `ops` of the group's first op
  Wave* wave = nullptr;
  auto flush = [&] {
    if (group.empty()) return;
    if (!load_) before_submit(group, first);
    backend_.submit(group);
    first += group.size();
    group.clear();
  };
  auto close_wave = [&] {
    if (wave && wave->pending.fetch_sub(1) == 1) wave_over(*wave);
    wave = nullptr;
  };
  for (LayerOp& op : ops) {
    if (!load_ && p_.reads_first && p_.reads_first->yielding()) {  // a load came: it goes first
      flush();
      p_.reads_first->before_write();
    }
    if (staged(op.item) && !staging_->try_acquire(&op.stage)) {
      flush();
      close_wave();
      op.stage = staging_->acquire();
    }
    if (waves) {
      if (!wave) {
        landing_[layer].fetch_add(1);
        queuing_[layer].fetch_add(1);
        wave = &waves_.emplace_back(layer, static_cast<uint32_t>(&op - ops.data()));
      }
      ++wave->count;
      wave->pending.fetch_add(1);
      op.wave = wave;
    }
    group.push_back(&op);
    if (group.size() == 64) flush();
  }
  flush();
  close_wave();
  // Drop the issue hold; if every op already finished, this completes the layer's I/O.
  if (pending_[layer].fetch_sub(1) == 1) waves ? waves_over(layer) : io_over(layer);
}

void IoRun::waves_over(uint32_t layer) {
  wave_queued(layer);
  wave_landed(layer);
}

void IoRun::wave_queued(uint32_t layer) {
  if (queuing_[layer].fetch_sub(1) == 1) sink_.layer_queued(layer);
}

void IoRun::wave_landed(uint32_t layer) {
  if (landing_[layer].fetch_sub(1) == 1) sink_.layer_landed(layer);
}

void IoRun::op_done(LayerOp& op, int64_t res) {
  if (res == static_cast<int64_t>(op.length)) {
    (op.write ? p_.counters->bytes_written : p_.counters->bytes_read) += op.length;
  } else {
    const std::string at = where(op.item, op.layer, op.lo);
    fail(op.item, op.layer, code_of_errno(res),
         res == -EBADMSG ? "checksum mismatch: the bytes read from " + at + " are not the ones stored"
         : res < 0       ? std::string(op.write ? "write to " : "read of ") + at + ": " + std::strerror(static_cast<int>(-res))
                         : std::string(op.write ? "short write to " : "short read of ") + at + " (" + std::to_string(res) +
                               " of " + std::to_string(op.length) + " bytes)");
  }
  if (op.wave && op.wave->pending.fetch_sub(1) == 1) wave_over(*op.wave);
  if (pending_[op.layer].fetch_sub(1) == 1) op.wave ? waves_over(op.layer) : io_over(op.layer);
}

void LayerOp::prepare() {
  if (stage.data) {
    buf = stage.data;
    buf_index = stage.region;
  }
  run->prepare(*this);
}

void LayerOp::complete(int64_t res) {
  if (res == static_cast<int64_t>(length) && !write) res = run->read_over(*this, res);
  if (stage.data && (write || !run->holds_staging())) run->staging_->release(stage);
  run->op_done(*this, res);
}

// ---- host: CPU I/O into host memory ---------------------------------------------------------

namespace {

constexpr uint64_t kCheckedPiece = 256 << 10;

class HostRun final : public IoRun {
 public:
  HostRun(const PathParts& parts, bool load, std::deque<PathChunk>& chunks, PathSink& sink,
          std::vector<std::pair<uint64_t, uint64_t>> ranges)
      : IoRun(parts, load, chunks, sink, std::move(ranges), parts.staging, *parts.backend) {
    piecewise_ = verify_ && ranges_.size() > 1 && std::all_of(ranges_.begin(), ranges_.end(), [](auto r) {
                   return r.first % kIoAlign == 0 && r.second % kIoAlign == 0;
                 });
    if (piecewise_) {
      const size_t n = chunks_.size() * kv_.shape().layers;
      terms_ = std::make_unique<std::atomic<uint64_t>[]>(n);
      pieces_ = std::make_unique<std::atomic<uint32_t>[]>(n);
      for (size_t k = 0; k < n; ++k) pieces_[k].store(static_cast<uint32_t>(ranges_.size()));
    }
  }

 private:
  bool whole(const LayerOp& op) const { return op.hi - op.lo == kv_.shape().layer_bytes(); }
  // Vectored I/O moves whole chunks; the others go through staging, and so does every read of a
  // load its waiter may give up on (a read into the blocks could not be called back).
  bool staged(uint32_t i) const override {
    return !p_.direct || !kv_.whole(chunks_[i].span) || (load_ && sink_.fence());
  }

  void prepare(LayerOp& op) override {
    PathChunk& c = chunks_[op.item];
    if (!op.stage.data) {
      op.iovs.clear();
      kv_.iovecs(op.layer, c.blocks, c.span, op.lo, op.hi, op.iovs);
      op.iov = op.iovs.data();
      op.iovcnt = static_cast<int>(op.iovs.size());
    } else if (op.write) {
      kv_.gather(op.layer, c.blocks, c.span, op.lo, op.hi, op.buf);
      if (whole(op)) zero_padding(op.buf);
    }
    if (op.write && op.lo == 0)
      c.sums[op.layer] = op.stage.data && whole(op) ? layer_sum(op.buf, op.length) : extent_checksum(kv_, op.layer, c);
  }

  // A whole extent is checked by the I/O thread: in staging before a byte reaches the blocks,
  // or in the blocks it was read into directly. A piece is hashed by its I/O thread while its
  // bytes are still in the core's cache, and the last piece of a chunk-layer checks the sum.
  int64_t read_over(LayerOp& op, int64_t res) override {
    const PathChunk& c = chunks_[op.item];
    std::optional<uint64_t> got;
    if (verify_ && whole(op)) {
      got = op.stage.data ? layer_sum(op.stage.data, op.length) : extent_checksum(kv_, op.layer, c);
    } else if (piecewise_) {
      const size_t k = size_t{op.item} * kv_.shape().layers + op.layer;
      terms_[k] += op.stage.data ? page_terms(op.stage.data, op.lo / kIoAlign, op.length / kIoAlign)
                                 : extent_terms(kv_, op.layer, c, op.lo, op.hi);
      if (pieces_[k].fetch_sub(1) == 1) got = layer_sum_of_terms(terms_[k].load(), kv_.shape().layer_bytes());
    }
    if (got && !matches(op.item, op.layer, *got)) {
      forget(op.item, op.layer);
      return -EBADMSG;  // op_done says where
    }
    if (op.stage.data) {
      const Fence::Pass pass(sink_.fence());
      if (!pass.open()) return -ETIMEDOUT;  // given up on: the chunk failed already
      kv_.scatter(op.layer, c.blocks, c.span, op.lo, op.hi, op.stage.data);
    }
    return res;
  }

  // Pieces that split pages (the per-block baseline's) are checked once the layer is all there.
  void io_over(uint32_t layer) override {
    if (verify_ && ranges_.size() > 1 && !piecewise_)
      for (uint32_t i = 0; i < chunks_.size(); ++i)
        if (!failed(i)) check_landed(i, layer, extent_checksum(kv_, layer, chunks_[i]));
    sink_.layer_landed(layer);
  }

  bool piecewise_ = false;                           // verify_, and every piece is whole pages
  std::unique_ptr<std::atomic<uint64_t>[]> terms_;   // per chunk-layer: the terms of its pieces
  std::unique_ptr<std::atomic<uint32_t>[]> pieces_;  // per chunk-layer: pieces still to land
};

class HostPath final : public LayerPath {
 public:
  HostPath(const PathParts& parts, bool per_block) : p_(parts), per_block_(per_block) {}
  const char* name() const override { return per_block_ ? "per-block" : "host"; }

  std::unique_ptr<PathRun> plan(bool load, std::deque<PathChunk>& chunks, PathSink& sink) override {
    const KvBinding& kv = *p_.kv;
    const Shape& s = kv.shape();
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    if (per_block_) {
      ranges = per_block_ranges(kv);
    } else if (p_.direct && !(load && sink.fence())) {  // a fenced load stages whole extents
      // Runs are whole iovecs. A checked load reads pieces of kCheckedPiece, each hashed right
      // after it lands: on the H200 machine's host, loads from /dev/shm keep 0.93 of the raw
      // read bandwidth so, against 0.80 hashing whole 1 MiB extents after the read, and 1.02
      // unchecked (docs/bench/2026-12-03-h200-verify-host).
      uint64_t step = kv.run_bytes() * IOV_MAX;
      if (load && p_.verify) step = std::min(step, kCheckedPiece);
      for (uint64_t o = 0; o < s.layer_bytes(); o += step) ranges.emplace_back(o, std::min(o + step, s.layer_bytes()));
    } else {
      ranges.emplace_back(0, s.layer_bytes());
    }
    return std::make_unique<HostRun>(p_, load, chunks, sink, std::move(ranges));
  }

 private:
  const PathParts p_;
  const bool per_block_;
};

}  // namespace

std::unique_ptr<LayerPath> make_layer_path(PathKind kind, const PathParts& parts) {
  switch (kind) {
    case PathKind::kHost: return make_host_path(parts, false);
    case PathKind::kHostPerBlock: return make_host_path(parts, true);
    case PathKind::kStagedCuda: return make_staged_cuda_path(parts);
    case PathKind::kCudaPerBlock: return make_per_block_cuda_path(parts);
    case PathKind::kGpuUring: return make_gpu_uring_path(parts);
    case PathKind::kMappedCuda: return make_mapped_cuda_path(parts);
  }
  fail(TUTTI_EINTERNAL, "unknown layer path");
}

std::unique_ptr<LayerPath> make_host_path(const PathParts& parts, bool per_block) {
  return std::make_unique<HostPath>(parts, per_block);
}

}  // namespace tutti
