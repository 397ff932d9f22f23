// SPDX-License-Identifier: Apache-2.0
// A latency histogram that threads add to without a lock: power-of-two microsecond buckets
// (tutti_histogram in tutti.h).
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "tutti.h"

namespace tutti {

class Histogram {
 public:
  void add(uint64_t ns) {
    const uint64_t us = ns / 1000 + (ns % 1000 != 0);  // a sample of 1.5 us is not "at most 1 us"
    // Bucket i holds (2^(i-1), 2^i] us: the bit width of us - 1.
    const unsigned i = us <= 1 ? 0 : static_cast<unsigned>(std::bit_width(us - 1));
    buckets_[i < kBuckets ? i : kBuckets - 1].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  // The count is the buckets' sum, so a reader never sees them disagree (the sum of the
  // samples may include one more or less, mid-add).
  void read(tutti_histogram* out) const {
    out->count = 0;
    for (unsigned i = 0; i < kBuckets; ++i) {
      out->buckets[i] = buckets_[i].load(std::memory_order_relaxed);
      out->count += out->buckets[i];
    }
    out->sum_ns = sum_ns_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr unsigned kBuckets = TUTTI_HISTOGRAM_BUCKETS;
  std::atomic<uint64_t> buckets_[kBuckets] = {};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace tutti
