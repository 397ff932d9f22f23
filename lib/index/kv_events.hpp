// SPDX-License-Identifier: Apache-2.0
// KV events: the chunks the pool gained and lost, kept for an engine's router
// (tutti_runtime_events). A bounded queue: when it is full the oldest event goes, counted.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

#include "resolver/key.hpp"
#include "tutti.h"

namespace tutti {

class KvEvents {
 public:
  explicit KvEvents(size_t capacity) : capacity_(capacity) {}

  void stored(const Key& key, const Key& parent, std::span<const int32_t> tokens);
  void removed(const Key& key);
  // Moves up to `cap` events into `out`, oldest first; their tokens stay valid until the next
  // call. Returns how many; *dropped: the events lost to a full queue since the last call.
  size_t drain(tutti_kv_event* out, size_t cap, uint64_t* dropped);

 private:
  struct Event {
    uint32_t type = 0;
    Key key, parent;
    std::vector<int32_t> tokens;
  };
  void push(Event e);

  const size_t capacity_;
  std::mutex mu_;
  std::deque<Event> pending_;  // guarded by mu_
  uint64_t dropped_ = 0;       // guarded by mu_
  std::vector<Event> handed_;  // the last drain's: their tokens are the caller's until the next
};

}  // namespace tutti
