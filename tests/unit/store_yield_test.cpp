// SPDX-License-Identifier: Apache-2.0
// A store's layer meets a load that arrives while the layer is being issued (option
// store_yield_ms): the writes already staged go out and finish, the ones not staged yet wait
// (ReadsFirst); once the load lands the rest of the layer follows.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "binding/kv_binding.hpp"
#include "binding/staging.hpp"
#include "common/fd.hpp"
#include "datapath/layer_path.hpp"
#include "pool/pool.hpp"
#include "scheduler/reads_first.hpp"

namespace tutti {
namespace {

// Holds every op it is handed until the test lets it finish.
class HeldBackend final : public Backend {
 public:
  const char* name() const override { return "held"; }
  std::string describe() const override { return "held: ops finish when the test says"; }
  void submit(std::span<IoOp* const> ops) override {
    std::lock_guard lock(mu_);
    held_.insert(held_.end(), ops.begin(), ops.end());
    submitted_ += ops.size();
    cv_.notify_all();
  }
  // Waits (at most 10 s) until `n` ops were submitted in all.
  size_t wait_submitted(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return submitted_ >= n; });
    return submitted_;
  }
  size_t submitted() {
    std::lock_guard lock(mu_);
    return submitted_;
  }
  void finish_held() {
    std::vector<IoOp*> ops;
    {
      std::lock_guard lock(mu_);
      ops.swap(held_);
    }
    for (IoOp* op : ops) {
      op->prepare();
      op->complete(static_cast<int64_t>(op->length));
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<IoOp*> held_;
  size_t submitted_ = 0;
};

struct Sink final : PathSink {
  void chunk_failed(uint32_t, uint32_t, int, const std::string& why) override { ADD_FAILURE() << why; }
  void layer_landed(uint32_t) override { ++landed; }
  void layer_queued(uint32_t) override {}
  std::atomic<int> landed{0};
};

TEST(StoreYield, WritesNotStagedYetWaitForALoadInFlight) {
  char dir[] = "/tmp/tutti-yield-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  constexpr uint32_t kChunks = 8, kTokens = 32;
  tutti_kv_layout l;
  ASSERT_EQ(tutti_kv_layout_init(&l, 1, kChunks, kTokens, 2, 64, 2, 0), 0);
  const uint64_t per_side = uint64_t{kChunks} * l.block_stride;
  AlignedBuffer mem(2 * per_side);
  void* k[1] = {mem.data()};
  l.k_base = k;
  l.v_offset = per_side;
  KvBinding kv(l, kTokens);
  PoolOptions po;
  po.uris.push_back(PoolUri{std::string(dir) + "/pool", 0});
  po.capacity = 16ull << 20;
  auto pool = Pool::open(po, kv.shape());
  Staging staging(2 * kv.shape().layer_bytes(), kv.shape().layer_bytes());  // the store's: two buffers
  HeldBackend backend;
  IoCounters counters;
  ReadsFirst reads_first;
  reads_first.set_max_wait(std::chrono::seconds(60));
  PathParts parts;
  parts.kv = &kv, parts.pool = pool.get(), parts.backend = &backend, parts.staging = &staging;
  parts.counters = &counters, parts.reads_first = &reads_first;
  auto path = make_layer_path(PathKind::kHost, parts);

  std::vector<int32_t> table(kChunks);
  std::deque<PathChunk> chunks(kChunks);
  for (uint32_t i = 0; i < kChunks; ++i) {
    table[i] = static_cast<int32_t>(i);
    chunks[i].slot = i, chunks[i].blocks = &table[i], chunks[i].span = gpu::ChunkSpan{0, 0, kTokens};
    chunks[i].sums.assign(1, 0);
  }
  Sink sink;
  auto run = path->plan(false, chunks, sink);
  std::thread issuer([&] { run->issue(0); });
  // Two writes staged and handed over; the issuer waits for a buffer for the third.
  EXPECT_EQ(backend.wait_submitted(2), 2u);
  reads_first.load_began();  // a load arrives
  backend.finish_held();     // the staged writes finish at once and free their buffers
  // The third write was past the gate, waiting for a buffer: it goes; the fourth waits.
  EXPECT_EQ(backend.wait_submitted(3), 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(backend.submitted(), 3u) << "a write took staging while a load was in flight";
  reads_first.load_landed();
  for (size_t n = 3; n < kChunks; n = backend.wait_submitted(n + 1)) backend.finish_held();
  backend.finish_held();
  issuer.join();
  EXPECT_EQ(backend.submitted(), size_t{kChunks});
  EXPECT_EQ(sink.landed.load(), 1);
  EXPECT_EQ(counters.bytes_written.load(), kChunks * kv.shape().layer_bytes());
  run.reset();
  pool.reset();
  EXPECT_EQ(std::system(("rm -rf " + std::string(dir)).c_str()), 0);
}

}  // namespace
}  // namespace tutti
