// SPDX-License-Identifier: Apache-2.0
// The index: chunk key -> slot, with LRU eviction under capacity pressure.
// A slot is Free, Writing (allocated to a store; invisible to lookups) or Committed. Loads pin
// committed slots; a pinned slot is never evicted, so an object being read is never
// overwritten. Thread-safe.
#pragma once

#include <cstdint>
#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "resolver/key.hpp"
#include "pool/format.hpp"

namespace tutti {

class Index {
 public:
  // Manages the slots [first, first + slots) (a rank's share of a pool, or all of it).
  explicit Index(uint64_t slots, uint64_t first = 0);

  // Rebuilds from commit records (newest generation wins for a duplicated key). Returns the
  // slots whose records lost to a newer duplicate, which the caller should tombstone.
  std::vector<uint64_t> recover(std::vector<Record> records);

  // How many of `keys` (from the first) are committed; marks them recently used, the first
  // most recently: evicting a prefix would orphan every chunk after it.
  size_t match_prefix(const std::vector<Key>& keys);
  // The same, then of tails(matched) — the keys of the partial chunks that may follow the
  // matched ones, shortest first — the longest committed: *tail is its index + 1, or 0. It is
  // marked used before the prefix, so it goes before the chunks it follows.
  size_t match_prefix(const std::vector<Key>& keys, const std::function<std::vector<Key>(size_t)>& tails, size_t* tail);

  // Pins the committed slot of `key`; nullopt if absent.
  std::optional<uint64_t> pin(const Key& key);
  void unpin(uint64_t slot);
  // Unpins a slot whose bytes failed their checksums, and forgets its chunk: lookups miss it
  // from now on (so an engine recomputes it and a store writes it anew, elsewhere), and the
  // slot is free once the last load that pinned it unpins.
  void discard(uint64_t slot);
  // Layer checksums of a committed or pinned slot.
  const std::vector<uint64_t>& layer_sums(uint64_t slot) const { return at(slot).sums; }

  enum class Claim { kAllocated, kPresent, kBeingWritten, kFull };
  struct Allocation {
    Claim claim = Claim::kFull;
    uint64_t slot = 0;
    bool reused = false;  // the slot's record may be on disk: tombstone it before writing
    uint64_t ticket = 0;  // kBeingWritten: the other store's write, for wait_settled
  };
  // Claims a slot to store `key`: kPresent if committed (then pinned: the caller unpins), or
  // kBeingWritten if another store has it in flight (see wait_settled), else a free slot or
  // the least recently used unpinned committed one (evicted now), else kFull.
  Allocation allocate(const Key& key);
  // A fresh generation number for the commit record of a written slot.
  uint64_t next_generation();
  // Makes a written slot visible once its record is durable.
  void commit(uint64_t slot, uint64_t generation, std::vector<uint64_t> sums);
  // Gives back a slot whose write failed. `dirty`: a record of it may be durable (a record
  // or tombstone write failed), so whoever takes the slot next tombstones it first.
  void abandon(uint64_t slot, bool dirty);
  // Blocks until the write `ticket` of slot `slot` (Allocation::ticket) is settled; true if
  // it committed (even if the chunk has been evicted since), false if it failed.
  bool wait_settled(uint64_t slot, uint64_t ticket);

  // Called, under the index's lock, with the key of every chunk that leaves: evicted for room,
  // or discarded as damaged (KV events). Set before the index is shared.
  void on_removed(std::function<void(const Key&)> fn) { on_removed_ = std::move(fn); }

  uint64_t slots() const { return slots_.size(); }
  uint64_t used() const;
  uint64_t committed() const;
  uint64_t evictions() const;
  uint64_t discarded() const;

 private:
  enum class State : uint8_t { kFree, kWriting, kCommitted };
  struct Slot {
    State state = State::kFree;
    uint32_t pins = 0;
    Key key;
    uint64_t generation = 0;
    bool dirty = false;        // free, but a record of it may be on disk
    bool discarded = false;    // committed and pinned, but damaged: freed by the last unpin
    uint64_t writes = 0;       // writes begun into this slot: the ticket of the current one
    uint64_t committed_write = 0;  // the last write that committed
    std::vector<uint64_t> sums;
    std::list<uint64_t>::iterator lru;  // valid while committed and unpinned
  };

  Slot& at(uint64_t slot) { return slots_[slot - first_]; }
  const Slot& at(uint64_t slot) const { return slots_[slot - first_]; }
  void touch(uint64_t slot);  // requires mu_
  void evict(uint64_t slot);  // requires mu_

  mutable std::mutex mu_;
  std::condition_variable settled_;  // a Writing slot was committed or abandoned
  uint64_t first_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<Key, uint64_t, KeyHash> map_;  // committed and writing keys
  std::vector<uint64_t> free_;                      // stack; lowest slots handed out first
  std::list<uint64_t> lru_;                         // front = most recent, unpinned only
  uint64_t next_generation_ = 1;
  uint64_t evictions_ = 0;
  uint64_t discarded_ = 0;
  std::function<void(const Key&)> on_removed_;
};

}  // namespace tutti
