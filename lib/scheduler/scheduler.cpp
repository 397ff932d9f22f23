// SPDX-License-Identifier: Apache-2.0
#include "scheduler/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include "common/thread_name.hpp"

namespace tutti {

Scheduler::Scheduler(unsigned lookahead, unsigned store_slack, int store_nice, ReadsFirst& reads_first)
    : lookahead_(lookahead ? lookahead : 1),
      store_slack_(store_slack),
      store_nice_(store_nice),
      reads_first_(reads_first),
      loader_([this] { run(false); }), storer_([this] { run(true); }) {}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  loader_.join();
  storer_.join();
}

// Wake-ups are sent under the lock: an I/O thread that calls in here must be done with the
// scheduler once it lets go of the lock, because close() may destroy it right after.
void Scheduler::enqueue(Scheduled* b) {
  std::lock_guard lock(mu_);
  (b->is_load() ? loads_ : stores_).push_back(b);
  if (b->is_load()) loads_in_flight_.push_back(b), ++loads_enqueued_, reads_first_.load_began();
  cv_.notify_all();
}

void Scheduler::load_landed(Scheduled* b) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return asking_ == 0; });  // the store thread may be asking b
  std::erase(loads_in_flight_, b);
  reads_first_.load_landed();
  cv_.notify_all();
}

void Scheduler::commit_later(Scheduled* b) {
  std::lock_guard lock(mu_);
  std::erase(stores_finishing_, b);
  commits_.push_back(b);
  cv_.notify_all();
}

void Scheduler::notify() {
  std::lock_guard lock(mu_);  // also orders this wake-up after the scheduler's predicate check
  cv_.notify_all();
}

bool Scheduler::loads_have_slack(std::unique_lock<std::mutex>& lock) {
  if (!store_slack_) return false;
  for (Scheduled* b : stores_)  // one store layer at a time in the slack, of all stores
    if (b->next_issue != b->done_prefix()) return false;
  for (Scheduled* b : stores_finishing_)
    if (b->done_prefix() != b->layers()) return false;
  // The loads answer (CUDA event queries) outside the lock: this thread runs at store_nice,
  // and preempted while holding it, it would hold up the loads' thread and I/O threads. A
  // load that lands meanwhile waits in load_landed until it is no longer asked.
  const std::vector<Scheduled*> loads = loads_in_flight_;
  const uint64_t enqueued = loads_enqueued_;
  ++asking_;
  lock.unlock();
  bool slack = true;
  for (Scheduled* b : loads)
    if (b->layers_ahead() < store_slack_) {
      slack = false;
      break;
    }
  lock.lock();
  if (--asking_ == 0) cv_.notify_all();
  return slack && loads_enqueued_ == enqueued;  // a load that came meanwhile was not asked
}

Scheduled* Scheduler::pick(bool stores, unsigned* layer, std::optional<bool> slack, bool* wants_slack) {
  std::deque<Scheduled*>& q = stores ? stores_ : loads_;
  for (auto it = q.begin(); it != q.end(); ++it) {
    Scheduled* b = *it;
    if (b->next_issue >= b->ready_prefix() || b->next_issue >= b->done_prefix() + lookahead_) continue;
    if (stores && !loads_in_flight_.empty() && !b->cancelled()) {  // reads before writes
      if (!slack || !*slack) {
        *wants_slack = store_slack_ != 0;
        continue;
      }
    }
    *layer = b->next_issue++;
    // Once its last layer is handed out the batch may finish (and be freed) at any time: a
    // store is forgotten when it asks to be committed (commit_later), a load when it lands.
    if (b->next_issue == b->layers()) {
      if (stores) stores_finishing_.push_back(b);
      q.erase(it);
    }
    return b;
  }
  return nullptr;
}

void Scheduler::run(bool stores) {
  name_this_thread(stores ? "tutti-sched-st" : "tutti-sched-ld");
  if (stores) nice_this_thread(store_nice_);
  std::unique_lock lock(mu_);
  std::optional<bool> slack;  // the loads' answer, asked outside the lock, for the next pick
  for (;;) {
    if (stores && !commits_.empty()) {
      Scheduled* b = commits_.front();
      commits_.pop_front();
      lock.unlock();
      b->commit();
      lock.lock();
      continue;
    }
    unsigned layer = 0;
    bool wants_slack = false;
    if (Scheduled* b = pick(stores, &layer, slack, &wants_slack)) {
      slack.reset();
      lock.unlock();
      b->issue_layer(layer);
      lock.lock();
      continue;
    }
    if (wants_slack && !slack) {  // a store waits for the loads' slack: ask them, then pick again
      slack = loads_have_slack(lock);
      continue;
    }
    slack.reset();
    if (stop_ && (stores ? stores_.empty() && commits_.empty() : loads_.empty())) return;
    // An engine's progress on its GPU stream wakes no one: a store waiting for slack asks
    // again every millisecond.
    if (wants_slack) cv_.wait_for(lock, std::chrono::milliseconds(1));
    else cv_.wait(lock);
  }
}

}  // namespace tutti
