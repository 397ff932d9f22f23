// SPDX-License-Identifier: Apache-2.0
// The layer-wise pipeline. Each submitted batch is issued layer by layer, with at most
// `lookahead` layers in flight beyond the last layer the batch completed, so layer L+1..L+d
// load while the engine consumes layer L. Reads before writes: loads have a thread of their
// own, so a load that arrives while a store's layer is being issued (its gather, checksums and
// staging) starts at once; the store thread starts a store's layer only while no load is in
// flight (submitted and not all landed), so stores fit into the gaps between loads (a layer
// already being written when a load arrives finishes alongside it), and it commits finished
// stores (sync, commit records), so I/O threads never block on fsync. A store waits as long as
// loads keep the device busy; a cancelled one, with nothing to write, does not. The store thread
// runs at `store_nice`, like the store backend's threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

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
  virtual void issue_layer(uint32_t layer) = 0;
  virtual void commit() = 0;                   // a store whose every layer is written
  uint32_t next_issue = 0;                     // guarded by the scheduler's mutex

 protected:
  ~Scheduled() = default;
};

class Scheduler {
 public:
  Scheduler(unsigned lookahead, int store_nice, ReadsFirst& reads_first);
  ~Scheduler();  // finishes every queued batch first
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void enqueue(Scheduled* b);
  void commit_later(Scheduled* b);  // a store whose last layer is written
  void notify();                // a layer finished or became ready somewhere: maybe issue more
  void load_landed();           // a load batch enqueued here has every layer in place

 private:
  void run(bool stores);
  Scheduled* pick(bool stores, unsigned* layer);  // requires mu_

  unsigned lookahead_;
  int store_nice_;
  ReadsFirst& reads_first_;  // told of every load that begins and lands
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Scheduled*> loads_, stores_, commits_;
  size_t loads_in_flight_ = 0;  // enqueued, not all landed
  bool stop_ = false;
  std::thread loader_, storer_;
};

}  // namespace tutti
