// SPDX-License-Identifier: Apache-2.0
// The scheduler's order: loads on their own thread, stores while no load is in flight or in
// the loads' slack, and the store I/O threads' gate (ReadsFirst) knows of every load in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/scheduler.hpp"

namespace tutti {
namespace {

struct Log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;
  void add(std::string line) {
    std::lock_guard lock(mu);
    lines.push_back(std::move(line));
    cv.notify_all();
  }
  // Waits (at most 10 s) until `n` lines are logged; returns them.
  std::vector<std::string> at_least(size_t n) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return lines.size() >= n; });
    return lines;
  }
};

// A batch whose layers land when the test says so; it logs what the scheduler issued.
class FakeBatch final : public Scheduled {
 public:
  FakeBatch(bool load, uint32_t layers, Log* log) : load_(load), layers_(layers), log_(log) {}
  bool is_load() const override { return load_; }
  uint32_t layers() const override { return layers_; }
  uint32_t done_prefix() const override { return landed_.load(); }
  bool cancelled() const override { return cancelled_.load(); }
  uint32_t layers_ahead() const override {
    asked_++;
    while (hold_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return ahead_.load();
  }
  void issue_layer(uint32_t layer) override { log_->add(std::string(load_ ? "load " : "store ") + std::to_string(layer)); }
  void commit() override { log_->add("commit"); }
  std::atomic<uint32_t> landed_{0};
  std::atomic<bool> cancelled_{false};
  std::atomic<uint32_t> ahead_{0};
  std::atomic<bool> hold_{false};  // layers_ahead answers only once this is false
  mutable std::atomic<int> asked_{0};

 private:
  const bool load_;
  const uint32_t layers_;
  Log* log_;
};

TEST(Scheduler, AStoreWaitsUntilEveryLoadHasLanded) {
  Log log;
  FakeBatch load(true, 2, &log), store(false, 1, &log);
  ReadsFirst rf;
  Scheduler s(4, 0, 0, rf);
  s.enqueue(&load);
  EXPECT_EQ(log.at_least(2), (std::vector<std::string>{"load 0", "load 1"}));
  s.enqueue(&store);  // both load layers are issued, neither has landed: the store waits
  load.landed_ = 1;
  s.notify();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.at_least(2).size(), 2u) << "a store layer was issued while a load was in flight";
  load.landed_ = 2;
  s.load_landed(&load);
  EXPECT_EQ(log.at_least(3).back(), "store 0");
  s.commit_later(&store);
  EXPECT_EQ(log.at_least(4).back(), "commit");
}

TEST(Scheduler, ALoadIsIssuedWhileAStoreIsInFlight) {
  Log log;
  FakeBatch store(false, 3, &log), load(true, 1, &log);
  ReadsFirst rf;
  Scheduler s(1, 0, 0, rf);
  s.enqueue(&store);
  EXPECT_EQ(log.at_least(1).back(), "store 0");  // lookahead 1: layer 1 waits for layer 0
  s.enqueue(&load);
  EXPECT_EQ(log.at_least(2).back(), "load 0");
  store.landed_ = 1;
  s.notify();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.at_least(2).size(), 2u) << "the store went on while the load was in flight";
  load.landed_ = 1;
  s.load_landed(&load);
  EXPECT_EQ(log.at_least(3).back(), "store 1");
  store.landed_ = 3;  // lets the scheduler hand out the last layer before it is destroyed
  s.notify();
  EXPECT_EQ(log.at_least(4).back(), "store 2");
}

// With store_slack 2, a store's layer goes while the load has two layers in place beyond the
// one its engine computes, one store layer at a time; with less slack the store waits again.
TEST(Scheduler, AStoreFitsIntoTheLoadsSlackOneLayerAtATime) {
  Log log;
  FakeBatch load(true, 8, &log), store(false, 4, &log);
  ReadsFirst rf;
  Scheduler s(4, 2, 0, rf);
  s.enqueue(&load);
  EXPECT_EQ(log.at_least(4).back(), "load 3");
  s.enqueue(&store);
  load.ahead_ = 1;  // the engine is one layer behind the reads: no slack yet
  s.notify();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.at_least(4).size(), 4u) << "a store layer was issued with too little slack";
  load.ahead_ = 2;  // no wake-up: an engine's GPU announces nothing, the store thread looks again
  EXPECT_EQ(log.at_least(5).back(), "store 0");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.at_least(5).size(), 5u) << "a second store layer went while the first was in flight";
  store.landed_ = 1;
  s.notify();
  EXPECT_EQ(log.at_least(6).back(), "store 1");
  load.ahead_ = 0;  // the engine caught up with the reads
  store.landed_ = 2;
  s.notify();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.at_least(6).size(), 6u) << "a store layer was issued while the engine waited for reads";
  load.landed_ = 8;  // lets the scheduler hand out the load's last layers (then it may finish)
  s.notify();
  EXPECT_EQ(log.at_least(10).back(), "load 7");
  s.load_landed(&load);  // no load in flight: the store's lookahead alone holds it
  const auto lines = log.at_least(12);
  EXPECT_EQ(std::vector<std::string>(lines.begin() + 10, lines.end()), (std::vector<std::string>{"store 2", "store 3"}));
}

// One store layer at a time in the slack, of all the stores waiting; and a store whose every
// layer is handed out still counts until it asks to be committed.
TEST(Scheduler, StoresShareTheSlackOneLayerAtATime) {
  Log log;
  FakeBatch load(true, 8, &log), a(false, 1, &log),
      b(false, 1, &log);
  ReadsFirst rf;
  Scheduler s(4, 2, 0, rf);
  s.enqueue(&load);
  EXPECT_EQ(log.at_least(4).back(), "load 3");
  load.ahead_ = 3;
  s.enqueue(&a);
  s.enqueue(&b);
  EXPECT_EQ(log.at_least(5).back(), "store 0");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.at_least(5).size(), 5u) << "two stores' layers went into the slack together";
  a.landed_ = 1;
  s.commit_later(&a);  // a is written: b's layer may go
  const auto lines = log.at_least(7);
  EXPECT_EQ(std::vector<std::string>(lines.begin() + 5, lines.end()), (std::vector<std::string>{"commit", "store 0"}));
  load.landed_ = 8;
  s.notify();
  EXPECT_EQ(log.at_least(11).back(), "load 7");
  s.load_landed(&load);
}

// The store thread asks the loads outside its lock; a load that lands meanwhile (and could then
// be freed) waits until the question is over.
TEST(Scheduler, ALoadLandingWhileAskedWaitsForTheQuestion) {
  Log log;
  FakeBatch load(true, 1, &log), store(false, 1, &log);
  ReadsFirst rf;
  Scheduler s(4, 2, 0, rf);
  s.enqueue(&load);
  EXPECT_EQ(log.at_least(1).back(), "load 0");
  load.hold_ = true;
  s.enqueue(&store);
  for (int i = 0; i < 10000 && load.asked_.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(load.asked_.load(), 0) << "the store thread never asked the load";
  std::atomic<bool> landed{false};
  std::thread lander([&] {
    load.landed_ = 1;
    s.load_landed(&load);
    landed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(landed.load()) << "a load was forgotten while the store thread was asking it";
  load.hold_ = false;
  lander.join();
  EXPECT_EQ(log.at_least(2).back(), "store 0");
}

// Slack is every load's: one load far ahead of its engine does not let a store past another
// whose engine waits for reads.
TEST(Scheduler, SlackIsEveryLoadsInFlight) {
  Log log;
  FakeBatch a(true, 1, &log), b(true, 1, &log), store(false, 1, &log);
  ReadsFirst rf;
  Scheduler s(4, 2, 0, rf);
  s.enqueue(&a);
  s.enqueue(&b);
  EXPECT_EQ(log.at_least(2).size(), 2u);
  a.ahead_ = 8;
  s.enqueue(&store);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.at_least(2).size(), 2u) << "a store layer was issued past a load without slack";
  b.ahead_ = 2;
  EXPECT_EQ(log.at_least(3).back(), "store 0");
  a.landed_ = 1;
  s.load_landed(&a);
  b.landed_ = 1;
  s.load_landed(&b);
}

// A store cancelled by its owner has nothing to write: it finishes even while loads are in
// flight, so destroying it does not wait for unrelated loads.
TEST(Scheduler, ACancelledStoreDoesNotWaitForLoads) {
  Log log;
  FakeBatch load(true, 1, &log), store(false, 1, &log);
  ReadsFirst rf;
  Scheduler s(4, 0, 0, rf);
  s.enqueue(&load);
  EXPECT_EQ(log.at_least(1).back(), "load 0");
  store.cancelled_ = true;
  s.enqueue(&store);
  EXPECT_EQ(log.at_least(2).back(), "store 0");
  load.landed_ = 1;
  s.load_landed(&load);
}

TEST(Scheduler, TellsTheWritersGateOfEveryLoadInFlight) {
  Log log;
  FakeBatch a(true, 1, &log), b(true, 1, &log);
  ReadsFirst rf;
  Scheduler s(4, 0, 0, rf);
  s.enqueue(&a);
  s.enqueue(&b);
  EXPECT_EQ(rf.loads_in_flight(), 2u);
  a.landed_ = 1;
  s.load_landed(&a);
  EXPECT_EQ(rf.loads_in_flight(), 1u);
  b.landed_ = 1;
  s.load_landed(&b);
  EXPECT_EQ(rf.loads_in_flight(), 0u);
}

// A write held back by a load goes on once the load lands, and is never held for good (a
// load that never lands must not stop the writers, nor a runtime's close).
TEST(ReadsFirst, AWriteWaitsForTheLoadButNotForever) {
  ReadsFirst rf;
  rf.load_began();
  rf.before_write();  // store_yield_ms=0 (the default): no wait
  rf.set_max_wait(std::chrono::seconds(60));
  std::atomic<bool> wrote{false};
  const auto start = std::chrono::steady_clock::now();
  std::thread writer([&] {
    rf.before_write();
    wrote = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(wrote.load()) << "a write went on while a load was in flight";
  rf.load_landed();
  writer.join();  // woken by the landing, long before the 60 s bound
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  rf.set_max_wait(std::chrono::milliseconds(5));
  rf.load_began();
  rf.before_write();  // returns after 5 ms although the load never lands
  EXPECT_EQ(rf.loads_in_flight(), 1u);
}

}  // namespace
}  // namespace tutti
