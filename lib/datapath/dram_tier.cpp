// SPDX-License-Identifier: Apache-2.0
#include "datapath/dram_tier.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace tutti {
namespace {

// Copies between the op's memory (one buffer or iovecs) and `p`.
void copy_op(const IoOp& op, std::byte* p, bool into_op) {
  if (op.buf) {
    into_op ? std::memcpy(op.buf, p, op.length) : std::memcpy(p, op.buf, op.length);
    return;
  }
  for (int i = 0; i < op.iovcnt; ++i) {
    auto* b = static_cast<std::byte*>(op.iov[i].iov_base);
    into_op ? std::memcpy(b, p, op.iov[i].iov_len) : std::memcpy(p, b, op.iov[i].iov_len);
    p += op.iov[i].iov_len;
  }
}

}  // namespace

DramTier::DramTier(uint64_t capacity, uint64_t extent_bytes)
    : extent_(extent_bytes) {
  TUTTI_EXPECT(extent_bytes > 0 && capacity >= extent_bytes,
               "dram_tier: " + std::to_string(capacity) + " bytes hold no extent of " + std::to_string(extent_bytes));
  const size_t n = capacity / extent_bytes;
  // Anonymous memory: pages are touched only when an extent is first kept.
  void* p = ::mmap(nullptr, n * extent_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail_errno(errno, "dram_tier: mmap " + std::to_string(n * extent_bytes) + " bytes");
  ::madvise(p, n * extent_bytes, MADV_HUGEPAGE);  // 2 MiB faults: a first fill costs 512x fewer
  base_ = {static_cast<std::byte*>(p), Unmap{n * extent_bytes}};
  slots_.resize(n);
  for (size_t i = n; i-- > 0;) free_.push_back(static_cast<int>(i));
}

void DramTier::Unmap::operator()(std::byte* p) const { ::munmap(p, bytes); }

int DramTier::acquire(const IoOp& op) {
  if (op.write || op.length != extent_) return -1;
  std::lock_guard lock(mu_);
  auto it = where_.find({op.file, op.offset});
  if (it == where_.end()) {
    ++misses_;
    return -1;
  }
  Slot& s = slots_[it->second];
  ++s.readers;
  lru_.splice(lru_.begin(), lru_, s.lru);
  ++hits_;
  return it->second;
}

void DramTier::copy_out(int slot, IoOp& op) const { copy_op(op, base_.get() + static_cast<size_t>(slot) * extent_, true); }

void DramTier::release(int slot) {
  std::lock_guard lock(mu_);
  Slot& s = slots_[slot];
  if (--s.readers == 0 && !s.listed) free_.push_back(slot);
}

void DramTier::unlist(int slot) {
  Slot& s = slots_[slot];
  where_.erase({s.file, s.offset});
  lru_.erase(s.lru);
  s.listed = false;
  if (s.readers == 0) free_.push_back(slot);
}

int DramTier::take_slot() {
  if (!free_.empty()) {
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it)
    if (slots_[*it].readers == 0) {
      const int slot = *it;
      unlist(slot);  // back onto free_
      free_.pop_back();
      return slot;
    }
  return -1;  // every slot is being read
}

void DramTier::keep(const IoOp& op) {
  int slot;
  {
    std::lock_guard lock(mu_);
    slot = take_slot();
    if (slot < 0) {  // keep nothing, and nothing stale
      if (auto it = where_.find({op.file, op.offset}); it != where_.end()) unlist(it->second);
      return;
    }
    slots_[slot].readers = 1;  // ours while we fill it
  }
  copy_op(op, base_.get() + static_cast<size_t>(slot) * extent_, false);
  std::lock_guard lock(mu_);
  if (auto it = where_.find({op.file, op.offset}); it != where_.end()) unlist(it->second);  // older bytes
  Slot& s = slots_[slot];
  s.readers = 0;
  s.file = op.file, s.offset = op.offset, s.listed = true;
  lru_.push_front(slot);
  s.lru = lru_.begin();
  where_[{op.file, op.offset}] = slot;
}

void DramTier::drop(uint32_t file, uint64_t offset, uint64_t length) {
  std::lock_guard lock(mu_);
  // Extents that overlap [offset, offset + length) of the file start after offset - extent_.
  const uint64_t from = offset >= extent_ ? offset - extent_ + 1 : 0;
  for (auto it = where_.lower_bound({file, from}); it != where_.end() && it->first.first == file &&
                                                   it->first.second < offset + length;) {
    const int slot = it->second;
    ++it;  // unlist() erases the current entry
    unlist(slot);
  }
}

namespace {

// The original op's memory, which its prepare() settles.
void take_memory(IoOp& to, const IoOp& from) {
  to.buf = from.buf, to.buf_index = from.buf_index, to.iov = from.iov, to.iovcnt = from.iovcnt;
}

// A load that the tier serves: the original op, and the slot it is copied from.
class HitOp final : public IoOp {
 public:
  HitOp(IoOp* orig, DramTier& tier, int slot) : orig_(orig), tier_(tier), slot_(slot) {
    file = orig->file, offset = orig->offset, length = orig->length;
  }
  void prepare() override {
    orig_->prepare();
    take_memory(*this, *orig_);
  }
  void complete(int64_t res) override {
    tier_.release(slot_);
    IoOp* orig = orig_;
    delete this;
    orig->complete(res);
  }
  int slot() const { return slot_; }

 private:
  IoOp* orig_;
  DramTier& tier_;
  int slot_;
};

// An op the pool serves; what it moved is kept in the tier (or dropped from it).
class PoolOp final : public IoOp {
 public:
  PoolOp(IoOp* orig, DramTier& tier) : orig_(orig), tier_(tier) {
    file = orig->file, offset = orig->offset, length = orig->length, write = orig->write;
    take_memory(*this, *orig);  // for backends that look before prepare()
  }
  void prepare() override {
    orig_->prepare();
    take_memory(*this, *orig_);
  }
  void complete(int64_t res) override {
    if (res == static_cast<int64_t>(length) && length == tier_.extent_bytes())
      tier_.keep(*this);
    else if (write)
      tier_.drop(*this);  // the pool's bytes there changed, or are unknown now
    IoOp* orig = orig_;
    delete this;
    orig->complete(res);
  }

 private:
  IoOp* orig_;
  DramTier& tier_;
};

class TieredBackend final : public Backend {
 public:
  TieredBackend(std::unique_ptr<Backend> inner, std::shared_ptr<DramTier> tier, unsigned threads)
      : inner_(std::move(inner)), tier_(std::move(tier)) {
    BackendConfig cfg;
    cfg.threads = threads;
    copier_ = make_thread_backend(cfg, "tier", "copies from the DRAM tier", [this](IoOp& op) -> int64_t {
      tier_->copy_out(static_cast<HitOp&>(op).slot(), op);
      return static_cast<int64_t>(op.length);
    });
  }
  ~TieredBackend() override {
    copier_.reset();  // both drain before the tier's memory goes
    inner_.reset();
  }

  const char* name() const override { return inner_->name(); }
  std::string describe() const override {
    return inner_->describe() + "; DRAM tier of " + std::to_string(tier_->capacity() >> 20) + " MiB in front (" +
           std::to_string(tier_->capacity() / tier_->extent_bytes()) + " extents)";
  }

  void submit(std::span<IoOp* const> ops) override {
    std::vector<IoOp*> hits, pool;
    for (IoOp* op : ops) {
      const int slot = tier_->acquire(*op);
      if (slot >= 0)
        hits.push_back(new HitOp(op, *tier_, slot));
      else
        pool.push_back(new PoolOp(op, *tier_));
    }
    if (!hits.empty()) copier_->submit(hits);
    if (!pool.empty()) inner_->submit(pool);
  }

 private:
  std::unique_ptr<Backend> inner_;
  std::shared_ptr<DramTier> tier_;
  std::unique_ptr<Backend> copier_;
};

}  // namespace

std::unique_ptr<Backend> make_tiered_backend(std::unique_ptr<Backend> inner, std::shared_ptr<DramTier> tier,
                                             unsigned threads) {
  return std::make_unique<TieredBackend>(std::move(inner), std::move(tier), threads);
}

}  // namespace tutti
