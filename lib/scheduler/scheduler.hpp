// SPDX-License-Identifier: Apache-2.0
// The layer-wise pipeline. Each submitted batch is issued layer by layer, with at most
// `lookahead` layers in flight beyond the last layer the batch completed, so layer L+1..L+d
// load while the engine consumes layer L. Reads before writes: loads have a thread of their
// own, so a load that arrives while a store's layer is being issued (its gather, checksums and
// staging) starts at once. The store thread starts a store's layer when no load is in flight
// (submitted and not all landed), or, with `store_slack` set (off by default: from zram it
// slowed the loads, docs/ttft.md), in the loads' slack: when every load in flight has at
// least `store_slack` layers in place beyond the one its engine is computing, a read that
// waits behind one store layer should still land before the engine needs it. Then one store
// layer at a time is written. A load whose engine has not waited for a layer yet, or waits for all
// of them at once, has no slack. A layer already being written when a load arrives finishes
// alongside it. The store thread also commits finished stores (sync, commit records), so I/O
// threads never block on fsync; it runs at `store_nice`, like the store backend's threads. A
// cancelled store, with nothing to write, never waits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "scheduler/reads_first.hpp"

namespace tutti {

// A batch as the scheduler sees it: layers to issue in order, and a commit for stores.
class Scheduled {
 public:
  virtual bool is_load() const = 0;
  virtual uint32_t layers() const = 0;
  virtual uint32_t done_prefix() const = 0;   // layers landed in order from the first
  virtual uint32_t ready_prefix() const { return layers(); }  // layers that may be issued
  virtual bool cancelled() const { return false; }  // a store with nothing left to write
  // A load: layers in place beyond the one its engine computes now (0: the engine waits for
  // I/O, has not waited for a layer yet, or waits for the whole batch). Asked under the
  // scheduler's lock, so it takes no lock of the batch's.
  virtual uint32_t layers_ahead() const { return 0; }
  virtual void issue_layer(uint32_t layer) = 0;
  virtual void commit() = 0;                   // a store whose every layer is written
  uint32_t next_issue = 0;                     // guarded by the scheduler's mutex

 protected:
  ~Scheduled() = default;
};

class Scheduler {
 public:
  Scheduler(unsigned lookahead, unsigned store_slack, int store_nice, ReadsFirst& reads_first);
  ~Scheduler();  // finishes every queued batch first
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void enqueue(Scheduled* b);
  void commit_later(Scheduled* b);  // a store whose last layer is written
  void notify();                // a layer finished or became ready somewhere: maybe issue more
  void load_landed(Scheduled* b);  // a load enqueued here has every layer in place (then forgotten)

 private:
  void run(bool stores);
  // Requires mu_. slack: the loads' answer, if asked (loads_have_slack); wants_slack: a store
  // waits for slack, which no wake-up announces.
  Scheduled* pick(bool stores, unsigned* layer, std::optional<bool> slack, bool* wants_slack);
  // Requires mu_ (held by `lock`, released while the loads answer). Every load in flight is
  // store_slack layers ahead of its engine, and no store has a layer in flight.
  bool loads_have_slack(std::unique_lock<std::mutex>& lock);

  unsigned lookahead_;
  unsigned store_slack_;  // 0: stores wait until no load is in flight
  int store_nice_;
  ReadsFirst& reads_first_;  // told of every load that begins and lands
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Scheduled*> loads_, stores_, commits_;
  std::vector<Scheduled*> loads_in_flight_;  // enqueued, not all landed
  std::vector<Scheduled*> stores_finishing_;  // every layer handed out, not all written
  unsigned asking_ = 0;          // loads_have_slack is asking loads outside the lock
  uint64_t loads_enqueued_ = 0;  // ever
  bool stop_ = false;
  std::thread loader_, storer_;
};

}  // namespace tutti
