// SPDX-License-Identifier: Apache-2.0
#include "scheduler/scheduler.hpp"

#include "common/thread_name.hpp"

namespace tutti {

Scheduler::Scheduler(unsigned lookahead, int store_nice, ReadsFirst& reads_first)
    : lookahead_(lookahead ? lookahead : 1),
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
  loads_in_flight_ += b->is_load();
  if (b->is_load()) reads_first_.load_began();
  cv_.notify_all();
}

void Scheduler::load_landed() {
  std::lock_guard lock(mu_);
  --loads_in_flight_;
  reads_first_.load_landed();
  cv_.notify_all();
}

void Scheduler::commit_later(Scheduled* b) {
  std::lock_guard lock(mu_);
  commits_.push_back(b);
  cv_.notify_all();
}

void Scheduler::notify() {
  std::lock_guard lock(mu_);  // also orders this wake-up after the scheduler's predicate check
  cv_.notify_all();
}

Scheduled* Scheduler::pick(bool stores, unsigned* layer) {
  std::deque<Scheduled*>& q = stores ? stores_ : loads_;
  for (auto it = q.begin(); it != q.end(); ++it) {
    Scheduled* b = *it;
    if (stores && loads_in_flight_ && !b->cancelled()) continue;  // reads before writes
    if (b->next_issue >= b->ready_prefix() || b->next_issue >= b->done_prefix() + lookahead_) continue;
    *layer = b->next_issue++;
    // Once its last layer is handed out the batch may finish (and be freed) at any time.
    if (b->next_issue == b->layers()) q.erase(it);
    return b;
  }
  return nullptr;
}

void Scheduler::run(bool stores) {
  name_this_thread(stores ? "tutti-sched-st" : "tutti-sched-ld");
  if (stores) nice_this_thread(store_nice_);
  std::unique_lock lock(mu_);
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
    if (Scheduled* b = pick(stores, &layer)) {
      lock.unlock();
      b->issue_layer(layer);
      lock.lock();
      continue;
    }
    if (stop_ && (stores ? stores_.empty() && commits_.empty() : loads_.empty())) return;
    cv_.wait(lock);
  }
}

}  // namespace tutti
