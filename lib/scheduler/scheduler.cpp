#include "scheduler/scheduler.hpp"

#include "common/thread_name.hpp"

namespace tutti {

Scheduler::Scheduler(unsigned lookahead) : lookahead_(lookahead ? lookahead : 1), thread_([this] { run(); }) {}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// Wake-ups are sent under the lock: an I/O thread that calls in here must be done with the
// scheduler once it lets go of the lock, because close() may destroy it right after.
void Scheduler::enqueue(Scheduled* b) {
  std::lock_guard lock(mu_);
  (b->is_load() ? loads_ : stores_).push_back(b);
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

Scheduled* Scheduler::pick(unsigned* layer) {
  auto ready = [&](Scheduled* b) { return b->next_issue < b->layers() && b->next_issue < b->done_prefix() + lookahead_; };
  for (std::deque<Scheduled*>* q : {&loads_, &stores_}) {
    for (auto it = q->begin(); it != q->end(); ++it) {
      Scheduled* b = *it;
      if (!ready(b)) continue;
      *layer = b->next_issue++;
      // Once its last layer is handed out the batch may finish (and be freed) at any time.
      if (b->next_issue == b->layers()) q->erase(it);
      return b;
    }
    if (!loads_.empty()) return nullptr;  // reads before writes
  }
  return nullptr;
}

void Scheduler::run() {
  name_this_thread("tutti-sched");
  std::unique_lock lock(mu_);
  for (;;) {
    if (!commits_.empty()) {
      Scheduled* b = commits_.front();
      commits_.pop_front();
      lock.unlock();
      b->commit();
      lock.lock();
      continue;
    }
    unsigned layer = 0;
    if (Scheduled* b = pick(&layer)) {
      lock.unlock();
      b->issue_layer(layer);
      lock.lock();
      continue;
    }
    if (stop_ && loads_.empty() && stores_.empty()) return;
    cv_.wait(lock);
  }
}

}  // namespace tutti
