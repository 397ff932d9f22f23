// SPDX-License-Identifier: Apache-2.0
// A fence in front of memory that a waiter may give up on: writers move bytes in only while
// they hold an open pass, and once close() has returned no pass is held and none opens, so no
// late byte lands after the waiter let the memory go (a load past load_timeout_ms).
#pragma once

#include <mutex>
#include <shared_mutex>

namespace tutti {

class Fence {
 public:
  // Held while a writer moves bytes in; open() says whether it may. No fence: always open.
  class Pass {
   public:
    explicit Pass(Fence* f)
        : lock_(f ? std::shared_lock<std::shared_mutex>(f->mu_) : std::shared_lock<std::shared_mutex>()),
          open_(!f || !f->closed_) {}
    bool open() const { return open_; }

   private:
    std::shared_lock<std::shared_mutex> lock_;
    bool open_;
  };

  // Waits for the passes held now; afterwards every pass is closed.
  void close() {
    std::unique_lock lock(mu_);
    closed_ = true;
  }

 private:
  std::shared_mutex mu_;
  bool closed_ = false;
};

}  // namespace tutti
