#include "scheduler/batch.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "common/checksum.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "pool/format.hpp"
#include "runtime/runtime.hpp"

namespace tutti {

namespace {

// The checksum (kernels/layer_sum.hpp) of a chunk-layer extent as it lies on disk, read from
// the engine's blocks: K runs, zero padding up to V, V runs, zero padding to the end. A page
// that is one run is hashed in place, any other is assembled first.
uint64_t extent_checksum(const KvBinding& kv, uint32_t layer, const int32_t* blocks) {
  const uint64_t bytes = kv.shape().layer_bytes();
  alignas(64) std::byte page[kIoAlign];
  uint64_t terms = 0;
  for (uint64_t p = 0; p < bytes; p += kIoAlign) {
    const std::byte* whole = nullptr;
    bool zeroed = false;  // zeroed lazily: most pages of a direct layout are one run
    kv.for_each_run(layer, blocks, p, p + kIoAlign, [&](const MemRun& r) {
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
  return layer_sum_of_terms(terms, bytes);
}

int code_of(int64_t res) { return res == -ENOSPC ? TUTTI_ENOSPC : res == -EBADMSG ? TUTTI_ECORRUPT : TUTTI_EIO; }

// A KV prefix with a hole is useless: every chunk after a failed one carries its status.
void fail_after_first_error(std::vector<int>& status) {
  int failed = 0;
  for (int& s : status) {
    if (failed) s = failed;
    else failed = s;
  }
}

}  // namespace

// ---- LayerOp: runs on I/O threads -------------------------------------------------------

void LayerOp::prepare() {
  Batch& b = *batch;
  const KvBinding& kv = b.rt_->binding();
  auto& item = b.items_[this->item];
  if (stage.data) {
    buf = stage.data;
    buf_index = stage.region;
    if (write) {
      if (!kv.on_device())
        kv.gather(layer, item.blocks, lo, hi, buf);
      else if (b.per_block_)  // one block's K or V: one copy out of HBM
        b.rt_->device()->copy_sync(buf, b.block_address(*this), hi - lo);
      // else the layer's gather kernel has filled it already
      // The padding after K and after V must be defined bytes: they are checksummed.
      const Shape& s = kv.shape();
      const uint64_t pad = s.v_offset() - s.kv_bytes();
      if (pad && hi - lo == s.layer_bytes()) {
        std::memset(buf + s.kv_bytes(), 0, pad);
        std::memset(buf + s.v_offset() + s.kv_bytes(), 0, pad);
      }
    }
  } else {
    iovs.clear();
    kv.iovecs(layer, item.blocks, lo, hi, iovs);
    iov = iovs.data();
    iovcnt = static_cast<int>(iovs.size());
  }
  if (write && lo == 0) {
    item.sums[layer] = stage.data && hi - lo == kv.shape().layer_bytes() ? layer_sum(buf, hi - lo)
                       : kv.on_device() ? b.device_extent_checksum(layer, item.blocks)
                                        : extent_checksum(kv, layer, item.blocks);
  }
}

void LayerOp::complete(int64_t res) {
  Batch& b = *batch;
  const KvBinding& kv = b.rt_->binding();
  auto& it = b.items_[item];
  if (res == static_cast<int64_t>(length) && !write) {
    // In host memory the I/O thread checks a whole extent against its commit record: in
    // staging, before a byte reaches the blocks, or in the blocks it was read into directly.
    // (CUDA memory: the checksum kernel checks the blocks after the scatter; a layer moved in
    // pieces is checked by layer_done.)
    if (b.verify_ && !kv.on_device() && lo == 0 && hi == kv.shape().layer_bytes()) {
      const uint64_t got = stage.data ? layer_sum(stage.data, length) : extent_checksum(kv, layer, it.blocks);
      if (got != b.rt_->index().layer_sums(it.slot)[layer]) {
        res = -EBADMSG;
        b.forget_cached(it, layer);
      }
    }
    if (res == static_cast<int64_t>(length) && stage.data) {
      if (!kv.on_device()) {
        kv.scatter(layer, it.blocks, lo, hi, stage.data);
      } else if (b.per_block_) {
        try {
          b.rt_->device()->copy_sync(b.block_address(*this), stage.data, length);
        } catch (const Error&) {
          res = -EIO;
        }
      }
    }
  }
  // In CUDA memory, a load's staging is held until the layer's scatter kernel has run.
  if (stage.data && (write || !kv.on_device() || b.per_block_)) b.rt_->staging_for(!write).release(stage);
  b.op_done(*this, res);
}

// ---- Batch ------------------------------------------------------------------------------

// The per-block baseline in CUDA memory writes block by block, but a commit record needs the
// checksum of the whole extent: the chunk-layer is copied out once more to compute it.
uint64_t Batch::device_extent_checksum(uint32_t layer, const int32_t* blocks) const {
  const KvBinding& kv = rt_->binding();
  const Shape& s = kv.shape();
  const uint64_t bb = kv.copy_layout().run_bytes;  // one block's K (or V)
  thread_local std::vector<std::byte> extent;
  extent.assign(s.layer_bytes(), std::byte{0});
  for (uint32_t u = 0; u < kv.blocks_per_chunk(); ++u) {
    const uint64_t at = uint64_t(blocks[u]) * kv.copy_layout().block_stride;
    rt_->device()->copy_sync(extent.data() + u * bb, kv.k(layer) + at, bb);
    rt_->device()->copy_sync(extent.data() + s.v_offset() + u * bb, kv.v(layer) + at, bb);
  }
  return layer_sum(extent.data(), extent.size());
}

std::byte* Batch::block_address(const LayerOp& op) const {
  // A per-block op moves one block's K or V, which lie whole in the block (checked at
  // registration for CUDA memory): [lo, hi) is run u of the K or V side.
  const KvBinding& kv = rt_->binding();
  const Shape& s = kv.shape();
  const bool is_v = op.lo >= s.v_offset();
  const uint64_t u = (op.lo - (is_v ? s.v_offset() : 0)) / (op.hi - op.lo);
  return (is_v ? kv.v(op.layer) : kv.k(op.layer)) +
         uint64_t(items_[op.item].blocks[u]) * kv.copy_layout().block_stride;
}

Batch::Batch(std::shared_ptr<Runtime> rt, tutti_op op) : rt_(std::move(rt)), op_(op) {
  TUTTI_EXPECT(op == TUTTI_OP_LOAD || op == TUTTI_OP_STORE, "op must be TUTTI_OP_LOAD or TUTTI_OP_STORE");
  rt_->require_registered();
  layers_ = rt_->binding().shape().layers;
}

Batch::~Batch() {
  {
    // Under the lock even when done: finish() may still be inside its critical section.
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return state_ != State::kRunning; });
  }
  // Here, not in finish(): finish() may run in a CUDA host callback, which must not call CUDA.
  if (pinned_) rt_->device()->host_free(pinned_);
  if (gpu_pinned_) rt_->device()->host_free(gpu_pinned_);
}

void Batch::add(const tutti_request* reqs, size_t n) {
  TUTTI_EXPECT_CODE(state_ == State::kBuilding, TUTTI_ESTATE, "requests can only be added before submit");
  TUTTI_EXPECT(reqs != nullptr || n == 0, "reqs is NULL");
  const KvBinding& kv = rt_->binding();
  const size_t ct = rt_->config().chunk_tokens;
  std::vector<Request> added;
  for (size_t i = 0; i < n; ++i) {
    const tutti_request& r = reqs[i];
    const auto at = [&] { return "request " + std::to_string(reqs_.size() + i) + ": "; };
    TUTTI_EXPECT(r.tokens != nullptr || r.num_tokens == 0, at() + "tokens is NULL");
    TUTTI_EXPECT(r.salt != nullptr || r.salt_len == 0, at() + "salt is NULL but salt_len is not 0");
    size_t end = r.token_end == TUTTI_TOKENS_ALL ? r.num_tokens : r.token_end;
    TUTTI_EXPECT(end <= r.num_tokens, at() + "token_end " + std::to_string(end) + " is past num_tokens " +
                                          std::to_string(r.num_tokens) + " (TUTTI_TOKENS_ALL asks for the whole prompt)");
    TUTTI_EXPECT(r.token_begin % ct == 0,
                 at() + "token_begin " + std::to_string(r.token_begin) + " is not a multiple of chunk_tokens " + std::to_string(ct));
    TUTTI_EXPECT(r.token_begin <= end, at() + "token_begin is past token_end");
    end -= end % ct;  // whole chunks only
    const size_t first = r.token_begin / ct, count = end > r.token_begin ? (end - r.token_begin) / ct : 0;
    const size_t need_blocks = end / kv.block_tokens();
    if (count) {
      TUTTI_EXPECT(r.block_table != nullptr, at() + "block_table is NULL");
      TUTTI_EXPECT(r.num_block_ids >= need_blocks, at() + "block_table has " + std::to_string(r.num_block_ids) +
                                                       " entries, the range needs " + std::to_string(need_blocks));
      for (size_t j = r.token_begin / kv.block_tokens(); j < need_blocks; ++j)
        TUTTI_EXPECT(r.block_table[j] >= 0 && static_cast<uint32_t>(r.block_table[j]) < kv.num_blocks(),
                     at() + "block id " + std::to_string(r.block_table[j]) + " at block_table[" + std::to_string(j) +
                         "] is outside [0, " + std::to_string(kv.num_blocks()) + ")");
    }
    Request q;
    q.r = r;
    q.first_chunk = first;
    auto keys = chunk_keys(rt_->root(r.salt, r.salt_len), r.tokens, end, ct);
    q.prefix.assign(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(std::min(first, keys.size())));
    q.keys.assign(keys.begin() + static_cast<std::ptrdiff_t>(std::min(first, keys.size())), keys.end());
    q.status.assign(count, 0);
    added.push_back(std::move(q));
  }
  for (auto& q : added) reqs_.push_back(std::move(q));
}

void Batch::submit() {
  TUTTI_EXPECT_CODE(state_ == State::kBuilding, TUTTI_ESTATE, "the batch was already submitted");
  rt_->require_open();
  rt_->batch_started();
  try {
    plan();
  } catch (...) {
    rt_->batch_ended();
    throw;
  }
}

void Batch::plan() {
  Index& index = rt_->index();
  const KvBinding& kv = rt_->binding();
  const size_t ct = rt_->config().chunk_tokens;
  // CUDA memory: what can fail is checked and allocated before anything is pinned or claimed,
  // for as many chunks as the batch could move.
  if (gpu::Device* dev = rt_->device()) {
    size_t chunks = 0;
    for (const Request& q : reqs_) chunks += q.keys.size();
    TUTTI_EXPECT(!is_load() || rt_->dram() || chunks <= rt_->staging_for(true).count(),
                 "a load into CUDA memory stages a whole layer: " + std::to_string(chunks) +
                     " chunks need staging >= " + std::to_string(chunks * rt_->staging_for(true).buffer_bytes()) +
                     " bytes (option staging / TUTTI_STAGING)");
    const size_t ids_bytes = align_up(chunks * kv.blocks_per_chunk() * sizeof(int32_t), 16);
    const size_t copies_bytes = size_t{layers_} * chunks * sizeof(gpu::ChunkCopy);
    const size_t status_bytes = align_up(rt_->dram() ? size_t{layers_} * chunks * sizeof(int32_t) : 0, 16);
    const size_t terms_bytes = is_load() && rt_->config().verify ? size_t{layers_} * chunks * sizeof(uint64_t) : 0;
    pinned_ = dev->host_alloc(ids_bytes + copies_bytes + status_bytes + terms_bytes, &pinned_dev_);
    ids_dev_ = pinned_dev_;
    copies_ = reinterpret_cast<gpu::ChunkCopy*>(static_cast<std::byte*>(pinned_) + ids_bytes);
    copies_dev_ = pinned_dev_ + ids_bytes;
    copies_stride_ = chunks;
    status_ = reinterpret_cast<int32_t*>(static_cast<std::byte*>(pinned_) + ids_bytes + copies_bytes);
    status_dev_ = pinned_dev_ + ids_bytes + copies_bytes;
    if (terms_bytes) {
      terms_ = reinterpret_cast<uint64_t*>(static_cast<std::byte*>(pinned_) + ids_bytes + copies_bytes + status_bytes);
      terms_dev_ = pinned_dev_ + ids_bytes + copies_bytes + status_bytes;
    }
  }
  // Plan: pin what we load, claim slots for what we store. Planning a request stops at its
  // first failed chunk; finish() marks the rest.
  for (uint32_t ri = 0; ri < reqs_.size(); ++ri) {
    Request& q = reqs_[ri];
    for (uint32_t c = 0; c < q.keys.size(); ++c) {
      const int32_t* blocks = q.r.block_table + (q.first_chunk + c) * ct / kv.block_tokens();
      if (is_load()) {
        auto slot = index.pin(q.keys[c]);
        if (!slot) {
          q.status[c] = TUTTI_ENOENT;
          break;
        }
        Item& it = items_.emplace_back();
        it.req = ri, it.chunk = c, it.slot = *slot, it.blocks = blocks;
      } else {
        if (c == 0)  // the chunks this request's chain starts from stay while it is stored
          for (const Key& k : q.prefix)
            if (auto slot = index.pin(k)) held_.push_back(*slot);
        auto a = index.allocate(q.keys[c]);
        if (a.claim == Index::Claim::kPresent) {
          held_.push_back(a.slot);  // pinned: making room for later chunks must not evict it
          continue;
        }
        if (a.claim == Index::Claim::kBeingWritten) {
          awaited_.push_back(Awaited{ri, c, a.slot, a.ticket});
          continue;
        }
        if (a.claim == Index::Claim::kFull) {
          q.status[c] = TUTTI_ENOSPC;
          break;
        }
        Item& it = items_.emplace_back();
        it.req = ri, it.chunk = c, it.slot = a.slot, it.blocks = blocks;
        it.dirty = a.reused;
        it.sums.assign(layers_, 0);
      }
    }
  }
  direct_ = rt_->direct();
  per_block_ = rt_->config().io_mode == IoMode::kPerBlockBaseline;
  verify_ = is_load() && rt_->config().verify;
  // What no single I/O (host memory) or kernel (CUDA memory) sees whole is checked per layer.
  check_layers_ = verify_ && (per_block_ || (direct_ && kv.run_bytes() * IOV_MAX < kv.shape().layer_bytes()));
  ops_.resize(layers_);
  scattered_.resize(layers_);
  if (pinned_) {  // the items' block ids, where the copy kernels read them
    const size_t bpc = kv.blocks_per_chunk();
    auto* ids = static_cast<int32_t*>(pinned_);
    for (size_t i = 0; i < items_.size(); ++i) {
      items_[i].first_block = static_cast<uint32_t>(i * bpc);
      std::copy_n(items_[i].blocks, bpc, ids + i * bpc);
    }
  }
  if (is_load() && rt_->gpu_uring() && !items_.empty()) plan_gpu_loads();
  if (is_load() && rt_->device()) {
    epoch_ = rt_->next_load_epoch();
    rt_->device()->begin_epoch(epoch_);
  }
  pending_ = std::make_unique<std::atomic<uint32_t>[]>(layers_);
  layer_done_.assign(layers_, 0);
  state_ = State::kRunning;
  if (items_.empty()) {
    for (uint32_t l = 0; l < layers_; ++l) {
      layer_done_[l] = 1;
      if (epoch_) rt_->device()->mark_ready(l, epoch_);
    }
    done_prefix_ = layers_;
    finish();
    return;
  }
  outstanding_ = layers_;  // one hold per layer until it is issued
  rt_->scheduler().enqueue(this);
}

// A store's first step, on the scheduler thread (submit never waits for the disk): slots
// whose old records may still be on disk get tombstones, durable before any byte of the new
// chunk is written, or a crash could pair the old key with new bytes. A slot whose tombstone
// fails is not written, and stays dirty.
void Batch::tombstone_reused() {
  std::vector<uint64_t> slots;
  for (const Item& it : items_)
    if (it.dirty) slots.push_back(it.slot);
  if (slots.empty()) return;
  try {
    rt_->pool().write_tombstones(slots);
    for (Item& it : items_) it.dirty = false;
  } catch (const Error& e) {
    for (Item& it : items_)
      if (it.dirty) fail_item(it, e.code());
  }
}

void Batch::issue_layer(uint32_t layer) {
  if (!is_load() && layer == 0) tombstone_reused();
  if (is_load() && rt_->gpu_uring()) return issue_layer_gpu(layer);
  if (rt_->dram() && rt_->device()) return issue_layer_dram(layer);
  const Shape& s = rt_->binding().shape();
  const KvBinding& kv = rt_->binding();
  const Geometry& g = rt_->pool().geometry();
  const bool per_block = rt_->config().io_mode == IoMode::kPerBlockBaseline;
  // Ranges of a chunk-layer object moved by one I/O each.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  if (per_block) {
    const uint64_t bb = s.token_bytes() * kv.block_tokens();
    for (uint64_t sec : {uint64_t{0}, s.v_offset()})
      for (uint64_t o = 0; o < s.kv_bytes(); o += bb) ranges.emplace_back(sec + o, sec + o + bb);
  } else if (direct_) {
    const uint64_t step = kv.run_bytes() * IOV_MAX;  // runs are whole iovecs
    for (uint64_t o = 0; o < s.layer_bytes(); o += step) ranges.emplace_back(o, std::min(o + step, s.layer_bytes()));
  } else {
    ranges.emplace_back(0, s.layer_bytes());
  }

  std::vector<LayerOp>& ops = ops_[layer];
  ops.reserve(items_.size() * ranges.size());
  for (uint32_t i = 0; i < items_.size(); ++i) {
    Item& it = items_[i];
    if (it.error.load(std::memory_order_relaxed)) continue;
    const Extent e = g.layer_extent(it.slot, layer);
    for (auto [lo, hi] : ranges) {
      LayerOp& op = ops.emplace_back();
      op.batch = this, op.item = i, op.layer = layer, op.lo = lo, op.hi = hi;
      op.file = e.file, op.offset = e.offset + lo, op.length = hi - lo, op.write = !is_load();
    }
  }
  pending_[layer].store(static_cast<uint32_t>(ops.size()) + 1);  // +1 held until all are issued
  outstanding_ += ops.size();
  rt_->counters().ios += ops.size();
  // Submit in groups; when staging runs out, hand over what is ready before blocking, so the
  // I/Os that will free buffers are already on their way.
  Staging* staging = direct_ ? nullptr : &rt_->staging_for(is_load());  // the baseline is never direct
  std::vector<IoOp*> group;
  group.reserve(64);
  const bool gather = !is_load() && rt_->device() && !per_block_;
  size_t first = 0;  // index in `ops` of the group's first op
  auto flush = [&] {
    if (group.empty()) return;
    if (gather) gather_on_device(group, first);  // a store from CUDA memory: blocks -> staging first
    rt_->backend_for(is_load()).submit(group);
    first += group.size();
    group.clear();
  };
  for (LayerOp& op : ops) {
    if (staging && !staging->try_acquire(&op.stage)) {
      flush();
      op.stage = staging->acquire();
    }
    group.push_back(&op);
    if (group.size() == 64) flush();
  }
  flush();
  // Drop the issue hold; if every op already finished this completes the layer.
  if (pending_[layer].fetch_sub(1) == 1) layer_io_done(layer);
  release();
}

void Batch::gather_on_device(std::vector<IoOp*>& group, size_t first) {
  const KvBinding& kv = rt_->binding();
  const uint32_t layer = static_cast<LayerOp*>(group[0])->layer;
  const size_t at = size_t{layer} * copies_stride_ + first;  // this group's descriptors
  for (size_t i = 0; i < group.size(); ++i) {
    auto* op = static_cast<LayerOp*>(group[i]);
    copies_[at + i] = gpu::ChunkCopy{rt_->staging().device_address(op->stage), items_[op->item].first_block};
  }
  try {
    rt_->device()->gather(kv.copy_layout(), kv.k(layer), kv.v(layer), copies_dev_ + at * sizeof(gpu::ChunkCopy),
                          group.size(), ids_dev_);
  } catch (const Error& e) {
    for (IoOp* p : group) {
      fail_item(items_[static_cast<LayerOp*>(p)->item], e.code());
    }
  }
}

void Batch::layer_io_done(uint32_t layer) {
  if (is_load() && rt_->device() && !per_block_)
    scatter_on_device(layer);
  else
    layer_done(layer);
}

// A CUDA host callback's argument: which batch's layer has landed. Deleted by on_landed.
struct Batch::Landed {
  Batch* batch;
  uint32_t layer;
};

template <void (Batch::*F)(uint32_t)>
void Batch::on_landed(void* arg) {
  auto* l = static_cast<Landed*>(arg);
  Batch* b = l->batch;
  const uint32_t layer = l->layer;
  delete l;
  (b->*F)(layer);
}

// A chunk-layer whose bytes failed their checksum: the DRAM tier must not serve it again; the
// next load rereads the pool.
void Batch::forget_cached(const Item& it, uint32_t layer) {
  if (DramTier* tier = rt_->tier()) {
    const Extent e = rt_->pool().geometry().layer_extent(it.slot, layer);
    tier->drop(e.file, e.offset, e.length);
  }
}

void Batch::fail_item(Item& it, int code) {
  int expected = 0;
  it.error.compare_exchange_strong(expected, code);  // the first error stays
}

void Batch::note_error(const Item& it, uint32_t layer, const std::string& what) {
  std::lock_guard lock(mu_);
  if (!first_error_.empty()) return;
  first_error_ = "request " + std::to_string(it.req) + ", chunk " + std::to_string(reqs_[it.req].first_chunk + it.chunk) +
                 ", layer " + std::to_string(layer) + ": " + what;
}

std::string Batch::first_error() const {
  std::lock_guard lock(mu_);
  return first_error_;
}

void Batch::fail_all(int code) {
  for (Item& it : items_) fail_item(it, code);
}

// One kernel scatters the whole layer from staging into the blocks; when it has run, a CUDA
// host callback gives the staging back and completes the layer.
void Batch::scatter_on_device(uint32_t layer) {
  const KvBinding& kv = rt_->binding();
  gpu::ChunkCopy* copies = copies_ + size_t{layer} * copies_stride_;
  std::vector<uint32_t>& scattered = scattered_[layer];
  for (LayerOp& op : ops_[layer])
    if (!items_[op.item].error.load()) {
      copies[scattered.size()] = gpu::ChunkCopy{rt_->staging_for(true).device_address(op.stage), items_[op.item].first_block};
      scattered.push_back(op.item);
    }
  outstanding_ += 1;  // held until the callback
  auto* arg = new Landed{this, layer};
  try {
    rt_->device()->scatter(kv.copy_layout(), kv.k(layer), kv.v(layer),
                           copies_dev_ + size_t{layer} * copies_stride_ * sizeof(gpu::ChunkCopy), scattered.size(),
                           ids_dev_, on_landed<&Batch::staged_layer_landed>, arg, 0, layer_terms_dev(layer));
  } catch (const Error& e) {
    fail_all(e.code());
    on_landed<&Batch::staged_layer_landed>(arg);
  }
}

// On a CUDA thread, after the scatter: the layer's staging goes back.
void Batch::staged_layer_landed(uint32_t layer) {
  for (LayerOp& op : ops_[layer]) rt_->staging_for(true).release(op.stage);
  if (verify_) {
    const uint64_t* terms = terms_ + size_t{layer} * copies_stride_;
    for (size_t i = 0; i < scattered_[layer].size(); ++i) check_terms(scattered_[layer][i], layer, terms[i]);
  }
  layer_done(layer);
  release();
}

// ---- gpu-uring ---------------------------------------------------------------------------

void Batch::plan_gpu_loads() {
  GpuUring& gu = *rt_->gpu_uring();
  Staging& staging = rt_->staging();
  const size_t n = items_.size();
  TUTTI_EXPECT(n <= gu.max_chunks(), "backend gpu-uring reads at most " + std::to_string(gu.max_chunks()) +
                                         " chunks per layer; this batch has " + std::to_string(n));
  // As many staging sets as the lookahead can use and the budget holds (at least one: the
  // staging check in submit() passed).
  const size_t sets = std::max<size_t>(
      1, std::min<size_t>({rt_->config().lookahead, staging.count() / n, gpu::UringDriver::kMaxStreams}));
  const size_t chunks_bytes = align_up(n * sizeof(gpu::IoChunk), 16);
  const size_t set_bytes = align_up(n * (sizeof(gpu::IoTarget) + sizeof(gpu::ChunkCopy)) + n * sizeof(int32_t), 16);
  uint64_t dev = 0;
  gpu_pinned_ = rt_->device()->host_alloc(chunks_bytes + sets * set_bytes, &dev);
  auto* base = static_cast<std::byte*>(gpu_pinned_);
  auto* chunks = reinterpret_cast<gpu::IoChunk*>(base);
  const Geometry& g = rt_->pool().geometry();
  for (size_t i = 0; i < n; ++i) {
    const Extent e = g.layer_extent(items_[i].slot, 0);
    chunks[i] = gpu::IoChunk{e.offset, e.file, rt_->pool().file(e.file).in_memory ? 1u : 0u};
  }
  gpu_chunks_ = dev;
  gpu_sets_.resize(sets);
  for (size_t k = 0; k < sets; ++k) {
    const size_t at = chunks_bytes + k * set_bytes;
    GpuSet& set = gpu_sets_[k];
    set.targets = dev + at;
    set.copies = set.targets + n * sizeof(gpu::IoTarget);
    set.status = set.copies + n * sizeof(gpu::ChunkCopy);
    set.targets_host = reinterpret_cast<gpu::IoTarget*>(base + at);
    set.copies_host = reinterpret_cast<gpu::ChunkCopy*>(set.targets_host + n);
    set.status_host = reinterpret_cast<const int32_t*>(set.copies_host + n);
  }
}

void Batch::issue_layer_gpu(uint32_t layer) {
  const KvBinding& kv = rt_->binding();
  const size_t n = items_.size();
  if (gpu_staging_.empty()) {  // first layer: the staging of every set, for the whole batch
    Staging& staging = rt_->staging();
    for (GpuSet& set : gpu_sets_) {
      for (size_t i = 0; i < n; ++i) {
        Staging::Buffer b = staging.acquire();
        gpu_staging_.push_back(b);
        set.targets_host[i] = gpu::IoTarget{reinterpret_cast<uint64_t>(b.data), static_cast<uint32_t>(b.region), 0};
        set.copies_host[i] = gpu::ChunkCopy{staging.device_address(b), items_[i].first_block};
      }
    }
  }
  const GpuSet& set = gpu_sets_[layer % gpu_sets_.size()];
  gpu::LayerLoad a;
  a.layer = layer;
  a.n = static_cast<uint32_t>(n);
  a.layer_bytes = kv.shape().layer_bytes();
  a.chunks = gpu_chunks_;
  a.targets = set.targets;
  a.copies = set.copies;
  a.ids = ids_dev_;
  a.status = set.status;
  a.terms = layer_terms_dev(layer);
  a.layout = kv.copy_layout();
  a.k = kv.k(layer);
  a.v = kv.v(layer);
  rt_->counters().ios += n;
  outstanding_ += 1;  // held until the layer has landed
  auto* arg = new Landed{this, layer};
  try {
    rt_->gpu_uring()->load_layer(static_cast<uint32_t>(layer % gpu_sets_.size()), a, on_landed<&Batch::gpu_layer_landed>,
                                 arg);
  } catch (const Error& e) {
    fail_all(e.code());
    delete arg;
    layer_done(layer);
    release();
  }
  release();  // the issue hold
}

// On a CUDA thread, once the layer's reads are over and its good chunks are in the blocks.
void Batch::gpu_layer_landed(uint32_t layer) {
  const int32_t* status = gpu_sets_[layer % gpu_sets_.size()].status_host;
  check_landed(layer, status);
  land(layer, status, /*errnos=*/true);
}

void Batch::dram_layer_landed(uint32_t layer) {
  const int32_t* status = status_ + size_t{layer} * copies_stride_;
  check_landed(layer, status);
  land(layer, status, /*errnos=*/false);
}

uint64_t Batch::layer_terms_dev(uint32_t layer) const {
  return terms_ ? terms_dev_ + size_t{layer} * copies_stride_ * sizeof(uint64_t) : 0;
}

// CUDA memory: the checksum kernel's terms of item i's layer, as it landed in the blocks,
// against its commit record.
void Batch::check_terms(uint32_t i, uint32_t layer, uint64_t terms) {
  Item& it = items_[i];
  if (layer_sum_of_terms(terms, rt_->binding().shape().layer_bytes()) == rt_->index().layer_sums(it.slot)[layer]) return;
  landed_corrupt(it, layer);
}

// A chunk-layer whose bytes in the blocks do not match its commit record: the chunk fails
// (the engine must not use those blocks) and the DRAM tier forgets it.
void Batch::landed_corrupt(Item& it, uint32_t layer) {
  fail_item(it, TUTTI_ECORRUPT);
  note_error(it, layer, "checksum mismatch in the blocks it landed in (the pool holds other bytes than were stored)");
  forget_cached(it, layer);
}

// Every item scattered (status 0) by gpu-uring or dram: one term each, in item order.
void Batch::check_landed(uint32_t layer, const int32_t* status) {
  if (!verify_) return;
  const uint64_t* terms = terms_ + size_t{layer} * copies_stride_;
  for (uint32_t i = 0; i < items_.size(); ++i)
    if (status[i] == 0) check_terms(i, layer, terms[i]);
}

// A load's layer is in place except for the chunks whose `status` is not 0 (a -errno, or a
// tutti_error): those fail, the rest count as read, and the layer is done.
void Batch::land(uint32_t layer, const int32_t* status, bool errnos) {
  uint64_t ok = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (status[i] == 0)
      ++ok;
    else
      fail_item(items_[i], errnos ? code_of(status[i]) : status[i]);
  }
  rt_->counters().bytes_read += ok * rt_->binding().shape().layer_bytes();
  layer_done(layer);
  release();
}

// ---- dram with CUDA memory ------------------------------------------------------------------

// The copy kernels move the layer straight between the mapped pool and the blocks.
void Batch::issue_layer_dram(uint32_t layer) {
  const KvBinding& kv = rt_->binding();
  const Shape& shape = kv.shape();
  const Geometry& g = rt_->pool().geometry();
  const DramPool& dram = *rt_->dram();
  gpu::Device& dev = *rt_->device();
  const size_t at = size_t{layer} * copies_stride_;
  gpu::ChunkCopy* copies = copies_ + at;
  int32_t* status = status_ + at;
  const size_t n = items_.size();
  std::vector<std::byte*> extents(n);  // where each chunk-layer lies in the mapped pool
  for (size_t i = 0; i < n; ++i) {
    const Extent e = g.layer_extent(items_[i].slot, layer);
    extents[i] = dram.host(e.file, e.offset);
    copies[i] = gpu::ChunkCopy{dram.device(e.file, e.offset), items_[i].first_block};
    status[i] = items_[i].error.load();
  }
  if (is_load()) {
    outstanding_ += 1;  // held until the callback
    auto* arg = new Landed{this, layer};
    try {
      dev.scatter(kv.copy_layout(), kv.k(layer), kv.v(layer), copies_dev_ + at * sizeof(gpu::ChunkCopy), n, ids_dev_,
                  on_landed<&Batch::dram_layer_landed>, arg, status_dev_ + at * sizeof(int32_t), layer_terms_dev(layer));
    } catch (const Error& e) {
      for (size_t i = 0; i < n; ++i) status[i] = e.code();
      on_landed<&Batch::dram_layer_landed>(arg);
    }
  } else {
    try {
      dev.gather(kv.copy_layout(), kv.k(layer), kv.v(layer), copies_dev_ + at * sizeof(gpu::ChunkCopy), n, ids_dev_);
      // The padding after K and after V is checksummed: it must hold defined bytes.
      const uint64_t pad = shape.v_offset() - shape.kv_bytes();
      for (size_t i = 0; i < n; ++i) {
        std::byte* p = extents[i];
        uint64_t sum = 0;
        const bool ok = touch_mapped([&] {
          std::memset(p + shape.kv_bytes(), 0, pad);
          std::memset(p + shape.v_offset() + shape.kv_bytes(), 0, pad);
          sum = layer_sum(p, shape.layer_bytes());
        });
        if (!ok) {
          const Extent e = g.layer_extent(items_[i].slot, layer);
          fail_item(items_[i], TUTTI_EIO);
          note_error(items_[i], layer, "write to " + rt_->pool().file(e.file).path + " at offset " + std::to_string(e.offset) +
                                           ": the file was truncated under its mapping (by another process?)");
        }
        items_[i].sums[layer] = sum;
      }
      rt_->counters().bytes_written += n * shape.layer_bytes();
    } catch (const Error& e) {
      fail_all(e.code());
    }
    layer_done(layer);
  }
  release();  // the issue hold
}

void Batch::release(uint64_t n) {
  if (outstanding_.fetch_sub(n) != n) return;
  if (is_load())
    finish();
  else
    rt_->scheduler().commit_later(this);
}

void Batch::op_done(LayerOp& op, int64_t res) {
  auto& c = rt_->counters();
  if (res == static_cast<int64_t>(op.length)) {
    (op.write ? c.bytes_written : c.bytes_read) += op.length;
  } else {
    Item& it = items_[op.item];
    fail_item(it, code_of(res));
    const Extent e = rt_->pool().geometry().layer_extent(it.slot, op.layer);
    const std::string where = rt_->pool().file(e.file).path + " at offset " + std::to_string(op.offset);
    note_error(it, op.layer,
               res == -EBADMSG ? "checksum mismatch: the bytes read from " + where + " are not the ones stored"
               : res < 0       ? std::string(op.write ? "write to " : "read of ") + where + ": " + std::strerror(static_cast<int>(-res))
                               : std::string(op.write ? "short write to " : "short read of ") + where + " (" +
                                     std::to_string(res) + " of " + std::to_string(op.length) + " bytes)");
  }
  if (pending_[op.layer].fetch_sub(1) == 1) layer_io_done(op.layer);
  release();
}

void Batch::layer_done(uint32_t layer) {
  if (check_layers_) check_layer(layer);
  if (epoch_) rt_->device()->mark_ready(layer, epoch_);  // stream waits may go on
  {
    std::lock_guard lock(mu_);
    layer_done_[layer] = 1;
    uint32_t p = done_prefix_.load();
    while (p < layers_ && layer_done_[p]) ++p;
    done_prefix_.store(p, std::memory_order_release);
  }
  cv_.notify_all();
  rt_->scheduler().notify();  // the lookahead window moved
}

// A layer that no single I/O saw whole (per-block transfers, direct I/O in pieces) is checked
// in the blocks once it is all there: by the CPU in host memory, by the checksum kernel in CUDA
// memory.
void Batch::check_layer(uint32_t layer) {
  const KvBinding& kv = rt_->binding();
  if (!kv.on_device()) {
    for (Item& it : items_) {
      if (it.error.load()) continue;
      if (extent_checksum(kv, layer, it.blocks) != rt_->index().layer_sums(it.slot)[layer]) landed_corrupt(it, layer);
    }
    return;
  }
  gpu::ChunkCopy* copies = copies_ + size_t{layer} * copies_stride_;
  std::vector<uint32_t>& checked = scattered_[layer];
  for (uint32_t i = 0; i < items_.size(); ++i)
    if (!items_[i].error.load()) {
      copies[checked.size()] = gpu::ChunkCopy{0, items_[i].first_block};
      checked.push_back(i);
    }
  try {
    rt_->device()->layer_terms_sync(kv.copy_layout(), kv.k(layer), kv.v(layer),
                                    copies_dev_ + size_t{layer} * copies_stride_ * sizeof(gpu::ChunkCopy),
                                    checked.size(), ids_dev_, layer_terms_dev(layer));
    const uint64_t* terms = terms_ + size_t{layer} * copies_stride_;
    for (size_t j = 0; j < checked.size(); ++j) check_terms(checked[j], layer, terms[j]);
  } catch (const Error& e) {
    for (uint32_t i : checked) fail_item(items_[i], e.code());
  }
}

void Batch::commit() {
  Pool& pool = rt_->pool();
  Index& index = rt_->index();
  std::vector<Record> records;
  // Last chunk first, here and when published below: a prompt's first chunks get the newest
  // generations, so they are the most recently used, after a reopen too.
  for (auto it = items_.rbegin(); it != items_.rend(); ++it)
    if (!it->error.load())
      records.push_back(Record{it->slot, index.next_generation(), reqs_[it->req].keys[it->chunk], it->sums});
  try {
    // Data first, then the records that make it visible; both durable before publishing.
    if (!records.empty()) {
      pool.sync();
      pool.write_records(records);
    }
  } catch (const Error& e) {
    // Some records may be durable after all: their slots are tombstoned before reuse.
    for (Item& it : items_)
      if (!it.error.load()) it.dirty = true;
    fail_all(e.code());
    records.clear();
  }
  // LRU eviction takes a chain from its end, never orphaning the chunks after a prefix.
  size_t r = 0;
  for (auto it = items_.rbegin(); it != items_.rend(); ++it) {
    if (!it->error.load()) {
      index.commit(it->slot, records[r].generation, std::move(records[r].layer_sums));
      ++r;
    } else {
      index.abandon(it->slot, it->dirty);
    }
  }
  rt_->counters().stored_chunks += records.size();
  finish();
}

void Batch::finish() {
  auto& c = rt_->counters();
  for (const Staging::Buffer& b : gpu_staging_) rt_->staging().release(b);  // every layer has landed
  gpu_staging_.clear();
  for (Item& it : items_) {
    if (is_load()) rt_->index().unpin(it.slot);
    if (int e = it.error.load()) reqs_[it.req].status[it.chunk] = e;
  }
  for (uint64_t slot : held_) rt_->index().unpin(slot);
  held_.clear();
  rt_->batch_ended();  // the last use of the runtime's I/O side: close() may go on
  for (Request& q : reqs_) {
    fail_after_first_error(q.status);
    c.failed_chunks += std::count_if(q.status.begin(), q.status.end(), [](int s) { return s != 0; });
  }
  {
    std::lock_guard lock(mu_);
    state_ = State::kDone;
    cv_.notify_all();  // under the lock: once the owner sees kDone it may free the batch
  }
}

void Batch::wait_layer(uint32_t layer) {
  TUTTI_EXPECT(layer < layers_, "layer " + std::to_string(layer) + " is out of range (the KV cache has " +
                                    std::to_string(layers_) + " layers)");
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "wait_layer before submit");
  auto t0 = std::chrono::steady_clock::now();
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return layer_done_[layer] != 0; });
  }
  uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  auto& c = rt_->counters();
  c.layer_waits++;
  c.layer_wait_ns += ns;
  c.per_layer_wait_ns[layer] += ns;
}

void Batch::wait_layer_async(uint32_t layer, void* stream) {
  TUTTI_EXPECT(layer < layers_, "layer " + std::to_string(layer) + " is out of range (the KV cache has " +
                                    std::to_string(layers_) + " layers)");
  TUTTI_EXPECT(is_load() && rt_->device(), "stream-ordered waits are for loads into CUDA memory");
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "wait_layer_async before submit");
  rt_->device()->enqueue_wait(stream, layer);
}

void Batch::settle() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return state_ == State::kDone; });
  }
  if (settled_) return;  // the batch belongs to one thread at a time
  settled_ = true;
  for (const Awaited& a : awaited_) {
    if (rt_->index().wait_settled(a.slot, a.ticket)) continue;  // stored (it may be evicted since)
    // The other batch that was storing it failed: this chunk is not in the pool.
    if (!reqs_[a.req].status[a.chunk]) reqs_[a.req].status[a.chunk] = TUTTI_ENOENT;
    fail_after_first_error(reqs_[a.req].status);
  }
}

int Batch::wait() {
  TUTTI_EXPECT_CODE(state_ != State::kBuilding, TUTTI_ESTATE, "wait before submit");
  settle();
  for (auto& q : reqs_)
    for (int s : q.status)
      if (s) return s;
  return 0;
}

tutti_result Batch::result(size_t request) {
  TUTTI_EXPECT(request < reqs_.size(), "request index " + std::to_string(request) + " is out of range");
  TUTTI_EXPECT_CODE(state_ == State::kDone, TUTTI_ESTATE, "results are ready after tutti_batch_wait");
  settle();
  const Request& q = reqs_[request];
  tutti_result r{};
  r.chunks = static_cast<uint32_t>(q.status.size());
  // Failures run to the end (fail_after_first_error), so the ok chunks are the leading ones.
  r.chunks_ok = static_cast<uint32_t>(std::find_if(q.status.begin(), q.status.end(), [](int s) { return s != 0; }) -
                                      q.status.begin());
  r.status = r.chunks_ok < r.chunks ? q.status[r.chunks_ok] : 0;
  r.tokens = size_t{r.chunks_ok} * rt_->config().chunk_tokens;
  return r;
}

size_t Batch::chunk_status(size_t request, int* out, size_t cap) {
  TUTTI_EXPECT(request < reqs_.size(), "request index " + std::to_string(request) + " is out of range");
  TUTTI_EXPECT(out != nullptr || cap == 0, "status is NULL");
  TUTTI_EXPECT_CODE(state_ == State::kDone, TUTTI_ESTATE, "chunk status is ready after tutti_batch_wait");
  settle();
  const Request& q = reqs_[request];
  size_t n = std::min(cap, q.status.size());
  std::copy_n(q.status.begin(), n, out);
  return n;
}

}  // namespace tutti
