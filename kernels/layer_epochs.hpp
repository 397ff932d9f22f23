// SPDX-License-Identifier: Apache-2.0
// The order in which load batches' layers are published to stream-ordered waits. A wait reads
// one number per layer, "every batch up to epoch E has this layer in place", and compares it
// with the newest batch's epoch when it runs on the GPU. Batches land out of order (parallel
// I/O threads, a newer batch submitted while an older one is still loading), so a newer batch's
// layer is published only once every older batch's has landed: otherwise a wait meant for the
// older batch could pass while its bytes are still on the way. Host-only: it runs in CUDA host
// callbacks, which may lock but not call CUDA.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

namespace tutti::gpu {

class LayerEpochs {
 public:
  explicit LayerEpochs(uint32_t layers = 0) : published_(layers, 0), pending_(layers) {}

  // Epoch `epoch` (epochs are numbered 1, 2, ... with none skipped) has `layer` in place;
  // returns the newest epoch now published for the layer.
  uint64_t landed(uint32_t layer, uint64_t epoch) {
    std::lock_guard lock(mu_);
    uint64_t& pub = published_[layer];
    std::set<uint64_t>& pend = pending_[layer];
    if (epoch > pub) pend.insert(epoch);
    while (!pend.empty() && *pend.begin() == pub + 1) {
      pub = *pend.begin();
      pend.erase(pend.begin());
    }
    return pub;
  }

 private:
  std::mutex mu_;
  std::vector<uint64_t> published_;
  std::vector<std::set<uint64_t>> pending_;  // landed, waiting for an older epoch
};

}  // namespace tutti::gpu
