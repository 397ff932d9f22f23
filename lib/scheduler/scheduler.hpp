// Scheduler v0: the layer-wise pipeline. One thread issues each submitted batch layer by layer,
// keeping at most `lookahead` layers in flight beyond the last layer the batch completed, so
// layer L+1..L+d load while the engine consumes layer L. Loads go first: a store batch issues a
// layer only while no load batch has layers left to issue. The same thread commits finished
// stores (sync, commit records), so I/O threads never block on fsync.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace tutti {

class Batch;

class Scheduler {
 public:
  explicit Scheduler(unsigned lookahead);
  ~Scheduler();  // finishes every queued batch first
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void enqueue(Batch* b);
  void commit_later(Batch* b);  // a store whose last layer is written
  void notify();                // a layer finished somewhere: maybe issue more

 private:
  void run();
  Batch* pick(unsigned* layer);  // requires mu_

  unsigned lookahead_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch*> loads_, stores_, commits_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tutti
