// SPDX-License-Identifier: Apache-2.0
// The clocks bench reads around each batch (wall, the calling thread's CPU, the process's CPU,
// tutti's own threads' CPU); fsck reads the wall clock to pace its progress lines.
#pragma once

namespace tutti::cli {

double now_s();          // CLOCK_MONOTONIC
double thread_cpu_s();   // CPU time of the calling thread
double process_cpu_s();  // user + system time of the whole process

// CPU time of this process's threads by kind, from /proc/self/task/*/schedstat (nanoseconds on
// a CPU): the scheduler and gpu-uring waker (tutti-sched, tutti-waker) and io_uring's SQPOLL
// threads (iou-sqp-*). Threads that exit between two samples are not counted.
struct ThreadCpu {
  double sched = 0, sqpoll = 0;
};
ThreadCpu thread_cpu_by_kind();

}  // namespace tutti::cli
