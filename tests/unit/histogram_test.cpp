// SPDX-License-Identifier: Apache-2.0
// Latency histograms: which bucket a sample lands in, at the edges of each.
#include <gtest/gtest.h>

#include "common/histogram.hpp"

namespace tutti {

TEST(Histogram, PowerOfTwoMicrosecondBuckets) {
  struct Case {
    uint64_t ns;
    unsigned bucket;
  };
  const Case cases[] = {{0, 0},           {1000, 0},           {1001, 1},          {2000, 1},
                        {2001, 2},        {4000, 2},           {1'000'000, 10},    {1'024'000, 10},
                        {1'024'001, 11},  {4'194'304'000, 22}, {4'194'304'001, 23}, {~uint64_t{0}, 23}};
  for (const Case& c : cases) {
    Histogram h;
    h.add(c.ns);
    tutti_histogram out{};
    h.read(&out);
    EXPECT_EQ(out.count, 1u);
    EXPECT_EQ(out.sum_ns, c.ns);
    for (unsigned i = 0; i < TUTTI_HISTOGRAM_BUCKETS; ++i) EXPECT_EQ(out.buckets[i], i == c.bucket ? 1u : 0u) << c.ns << " ns, bucket " << i;
  }
}

}  // namespace tutti
