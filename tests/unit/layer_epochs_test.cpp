// SPDX-License-Identifier: Apache-2.0
// Stream-ordered waits read, per layer, the epoch up to which every load batch has landed it:
// a newer batch's layer is never published while an older batch's is still on its way.
#include "kernels/layer_epochs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

using tutti::gpu::LayerEpochs;

TEST(LayerEpochs, InOrderPublishesEachEpoch) {
  LayerEpochs e(2);
  EXPECT_EQ(e.landed(0, 1), 1u);
  EXPECT_EQ(e.landed(0, 2), 2u);
  EXPECT_EQ(e.landed(1, 1), 1u);  // layers are independent
}

TEST(LayerEpochs, ANewerBatchWaitsForTheOlderOne) {
  LayerEpochs e(1);
  EXPECT_EQ(e.landed(0, 2), 0u);  // batch 1 is still loading: a wait for it must not pass
  EXPECT_EQ(e.landed(0, 3), 0u);
  EXPECT_EQ(e.landed(0, 1), 3u);  // now 1, 2 and 3 are all in place
  EXPECT_EQ(e.landed(0, 3), 3u);  // a repeated mark changes nothing
}

TEST(LayerEpochs, NeverPublishesAnEpochWithAnOlderOneMissing) {
  constexpr uint32_t kLayers = 4;
  constexpr uint64_t kEpochs = 2000;
  LayerEpochs e(kLayers);
  std::vector<std::atomic<bool>> in_place(kLayers * (kEpochs + 1));
  std::vector<std::pair<uint32_t, uint64_t>> marks;
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint64_t ep = 1; ep <= kEpochs; ++ep) marks.emplace_back(l, ep);
  std::shuffle(marks.begin(), marks.end(), std::mt19937_64(7));
  std::atomic<size_t> next{0};
  std::atomic<int> early{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < marks.size();) {
        auto [l, ep] = marks[i];
        in_place[l * (kEpochs + 1) + ep] = true;
        const uint64_t pub = e.landed(l, ep);
        for (uint64_t k = 1; k <= pub; k += 97)  // sampled: every 97th epoch up to the published one
          if (!in_place[l * (kEpochs + 1) + k]) early++;
        if (pub && !in_place[l * (kEpochs + 1) + pub]) early++;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(early.load(), 0);
  for (uint32_t l = 0; l < kLayers; ++l) EXPECT_EQ(e.landed(l, kEpochs), kEpochs);
}
