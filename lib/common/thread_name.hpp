// Threads carry names (seen in top, perf and /proc/PID/task/*/comm) so their CPU time can be
// told apart; `tutti bench` sums it per name.
#pragma once

#include <pthread.h>

namespace tutti {

inline void name_this_thread(const char* name) { pthread_setname_np(pthread_self(), name); }  // <= 15 chars

}  // namespace tutti
