// SPDX-License-Identifier: Apache-2.0
#include "index/index.hpp"

#include <algorithm>

namespace tutti {

Index::Index(uint64_t slots, uint64_t first) : first_(first), slots_(slots) {
  free_.reserve(slots);
  for (uint64_t s = slots; s-- > 0;) free_.push_back(first + s);
}

std::vector<uint64_t> Index::recover(std::vector<Record> records) {
  std::lock_guard lock(mu_);
  // Oldest first, so LRU order follows commit order and the newest duplicate wins.
  std::sort(records.begin(), records.end(), [](const Record& a, const Record& b) { return a.generation < b.generation; });
  std::vector<uint64_t> stale;
  for (Record& r : records) {
    if (r.slot < first_ || r.slot - first_ >= slots_.size()) continue;  // another rank's, or past the end
    if (auto it = map_.find(r.key); it != map_.end()) {
      Slot& old = at(it->second);
      lru_.erase(old.lru);
      old.state = State::kFree;
      stale.push_back(it->second);
      map_.erase(it);
    }
    Slot& s = at(r.slot);
    s.state = State::kCommitted;
    s.key = r.key;
    s.generation = r.generation;
    s.sums = std::move(r.layer_sums);
    lru_.push_front(r.slot);
    s.lru = lru_.begin();
    map_[r.key] = r.slot;
    next_generation_ = std::max(next_generation_, r.generation + 1);
  }
  free_.clear();
  for (uint64_t s = slots_.size(); s-- > 0;)
    if (slots_[s].state == State::kFree) free_.push_back(first_ + s);
  return stale;
}

void Index::touch(uint64_t slot) {
  Slot& s = at(slot);
  if (s.state == State::kCommitted && s.pins == 0) lru_.splice(lru_.begin(), lru_, s.lru);
}

size_t Index::match_prefix(const std::vector<Key>& keys) {
  size_t tail = 0;
  return match_prefix(keys, {}, &tail);
}

size_t Index::match_prefix(const std::vector<Key>& keys, const std::function<std::vector<Key>(size_t)>& tails,
                           size_t* tail) {
  std::lock_guard lock(mu_);
  auto committed = [&](const Key& k) -> std::optional<uint64_t> {
    auto it = map_.find(k);
    if (it == map_.end() || at(it->second).state != State::kCommitted) return std::nullopt;
    return it->second;
  };
  std::vector<uint64_t> hit;
  for (const Key& k : keys) {
    auto slot = committed(k);
    if (!slot) break;
    hit.push_back(*slot);
  }
  *tail = 0;
  if (tails) {
    const std::vector<Key> t = tails(hit.size());
    for (size_t i = t.size(); i-- > 0;)
      if (auto slot = committed(t[i])) {
        touch(*slot);
        *tail = i + 1;
        break;
      }
  }
  for (auto s = hit.rbegin(); s != hit.rend(); ++s) touch(*s);
  return hit.size();
}

std::optional<uint64_t> Index::pin(const Key& key) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end() || at(it->second).state != State::kCommitted) return std::nullopt;
  Slot& s = at(it->second);
  if (s.pins++ == 0) lru_.erase(s.lru);
  return it->second;
}

void Index::unpin(uint64_t slot) {
  std::lock_guard lock(mu_);
  Slot& s = at(slot);
  if (s.pins == 0 || --s.pins > 0) return;
  if (s.discarded) {  // the last load of a damaged chunk is done: the slot is free again
    s.state = State::kFree;
    s.discarded = false;
    s.dirty = true;  // its record is still on disk
    s.sums.clear();
    free_.push_back(slot);
    return;
  }
  lru_.push_front(slot);
  s.lru = lru_.begin();
}

void Index::discard(uint64_t slot) {
  {
    std::lock_guard lock(mu_);
    Slot& s = at(slot);
    if (s.state != State::kCommitted || s.pins == 0) return;
    if (!s.discarded) {
      s.discarded = true;
      ++discarded_;
      if (auto it = map_.find(s.key); it != map_.end() && it->second == slot) map_.erase(it);
      if (on_removed_) on_removed_(s.key);
    }
  }
  unpin(slot);
}

uint64_t Index::discarded() const {
  std::lock_guard lock(mu_);
  return discarded_;
}

void Index::evict(uint64_t slot) {
  Slot& s = at(slot);
  map_.erase(s.key);
  lru_.erase(s.lru);
  s.state = State::kFree;
  s.sums.clear();
  ++evictions_;
  if (on_removed_) on_removed_(s.key);
}

Index::Allocation Index::allocate(const Key& key) {
  std::lock_guard lock(mu_);
  Allocation a;
  if (auto it = map_.find(key); it != map_.end()) {
    Slot& s = at(it->second);
    a.slot = it->second;
    if (s.state == State::kCommitted) {
      a.claim = Claim::kPresent;
      if (s.pins++ == 0) lru_.erase(s.lru);
    } else {
      a.claim = Claim::kBeingWritten;
      a.ticket = s.writes;
    }
    return a;
  }
  if (!free_.empty()) {
    a.slot = free_.back();
    free_.pop_back();
    a.reused = at(a.slot).dirty;
  } else if (!lru_.empty()) {
    a.slot = lru_.back();
    evict(a.slot);
    a.reused = true;
  } else {
    return a;  // kFull: everything is being written or pinned
  }
  Slot& s = at(a.slot);
  s.state = State::kWriting;
  s.dirty = false;
  ++s.writes;
  s.key = key;
  map_[key] = a.slot;
  a.claim = Claim::kAllocated;
  return a;
}

uint64_t Index::next_generation() {
  std::lock_guard lock(mu_);
  return next_generation_++;
}

void Index::commit(uint64_t slot, uint64_t generation, std::vector<uint64_t> sums) {
  {
    std::lock_guard lock(mu_);
    Slot& s = at(slot);
    s.state = State::kCommitted;
    s.generation = generation;
    s.committed_write = s.writes;
    s.sums = std::move(sums);
    lru_.push_front(slot);
    s.lru = lru_.begin();
  }
  settled_.notify_all();
}

bool Index::wait_settled(uint64_t slot, uint64_t ticket) {
  std::unique_lock lock(mu_);
  const Slot& s = at(slot);
  settled_.wait(lock, [&] { return s.writes != ticket || s.state != State::kWriting; });
  return s.committed_write == ticket;
}

void Index::abandon(uint64_t slot, bool dirty) {
  {
    std::lock_guard lock(mu_);
    Slot& s = at(slot);
    if (s.state != State::kWriting) return;
    map_.erase(s.key);
    s.state = State::kFree;
    s.dirty = dirty;
    free_.push_back(slot);
  }
  settled_.notify_all();
}

uint64_t Index::used() const {
  std::lock_guard lock(mu_);
  return slots_.size() - free_.size();
}

uint64_t Index::committed() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (auto& s : slots_) n += s.state == State::kCommitted;
  return n;
}

uint64_t Index::evictions() const {
  std::lock_guard lock(mu_);
  return evictions_;
}

}  // namespace tutti
