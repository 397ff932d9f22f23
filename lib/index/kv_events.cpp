// SPDX-License-Identifier: Apache-2.0
#include "index/kv_events.hpp"

#include <algorithm>
#include <utility>

namespace tutti {

void KvEvents::stored(const Key& key, const Key& parent, std::span<const int32_t> tokens) {
  push(Event{TUTTI_KV_STORED, key, parent, std::vector<int32_t>(tokens.begin(), tokens.end())});
}

void KvEvents::removed(const Key& key) { push(Event{TUTTI_KV_REMOVED, key, Key{}, {}}); }

void KvEvents::push(Event e) {
  std::lock_guard lock(mu_);
  if (pending_.size() == capacity_) {
    pending_.pop_front();
    ++dropped_;
  }
  pending_.push_back(std::move(e));
}

size_t KvEvents::drain(tutti_kv_event* out, size_t cap, uint64_t* dropped) {
  std::vector<Event> taken;
  {
    std::lock_guard lock(mu_);
    const size_t n = std::min(cap, pending_.size());
    taken.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      taken.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    if (dropped) *dropped = dropped_;
    dropped_ = 0;
  }
  handed_ = std::move(taken);  // the previous call's tokens go now
  for (size_t i = 0; i < handed_.size(); ++i) {
    const Event& e = handed_[i];
    tutti_kv_event& o = out[i];
    o.type = e.type;
    o.num_tokens = static_cast<uint32_t>(e.tokens.size());
    o.key[0] = e.key.lo;
    o.key[1] = e.key.hi;
    o.parent[0] = e.parent.lo;
    o.parent[1] = e.parent.hi;
    o.tokens = e.tokens.empty() ? nullptr : e.tokens.data();
  }
  return handed_.size();
}

}  // namespace tutti
