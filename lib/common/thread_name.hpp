// SPDX-License-Identifier: Apache-2.0
// Threads carry names (seen in top, perf and /proc/PID/task/*/comm) so their CPU time can be
// told apart; `tutti bench` sums it per name. Threads that do a store's work also run at a
// lower CPU priority, so that the engine's threads and the loads' threads come first.
#pragma once

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

namespace tutti {

inline void name_this_thread(const char* name) { pthread_setname_np(pthread_self(), name); }  // <= 15 chars

// Linux nice values are per thread. Raising one needs no privilege; if it fails anyway (a
// seccomp policy), the thread runs at the process's priority, which is only slower.
inline void nice_this_thread(int nice) {
  if (nice > 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice);
}

}  // namespace tutti
