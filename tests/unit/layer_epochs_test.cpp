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

// A load that gives up (load_timeout_ms) marks every layer of its epoch at once, and its copies
// that were already queued mark theirs again when they land, before or after an older batch's:
// a second mark of a pending epoch, or of a published one, changes nothing.
TEST(LayerEpochs, AGiveUpMarksAgainWhatItsLateCopiesMark) {
  LayerEpochs e(2);
  EXPECT_EQ(e.landed(0, 1), 1u);
  EXPECT_EQ(e.landed(0, 3), 1u);  // batch 3's layer 0 landed; batch 2 still loading
  EXPECT_EQ(e.landed(0, 2), 3u);  // batch 2 gave up: marked, so 2 and 3 are out
  EXPECT_EQ(e.landed(1, 2), 0u);  // ... and its layer 1 while batch 1's is still on the way
  EXPECT_EQ(e.landed(1, 2), 0u);  // a late copy of batch 2 marks it again: still pending once
  EXPECT_EQ(e.landed(1, 1), 2u);
  EXPECT_EQ(e.landed(0, 2), 3u);  // a late copy after publication: nothing moves back
  EXPECT_EQ(e.landed(1, 3), 3u);
}
