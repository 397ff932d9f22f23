// SPDX-License-Identifier: Apache-2.0
// The clocks bench reads around each batch (wall, the calling thread's CPU, the process's CPU,
// tutti's own threads' CPU); fsck reads the wall clock to pace its progress lines.
#pragma once

#include <vector>

namespace tutti::cli {

double now_s();          // CLOCK_MONOTONIC
double thread_cpu_s();   // CPU time of the calling thread
double process_cpu_s();  // user + system time of the whole process

// CPU time of this process's threads by kind, from /proc/self/task/*/schedstat (nanoseconds on
// a CPU): the scheduler and gpu-uring's waker and copier (tutti-sched, tutti-waker,
// tutti-copier), io_uring's SQPOLL
// threads (iou-sqp-*: submission) and its worker threads (iou-wrk-*: the reads async_reads
// hands them, whose copying is the device's on a DMA device). A sample keeps each thread's
// time; the difference of two counts a thread born between them whole and one that exited
// between them not at all (io_uring workers exit after seconds idle).
struct ThreadCpu {
  double sched = 0, sqpoll = 0, workers = 0;
};
struct ThreadSample {
  struct Task {
    long tid;
    double ThreadCpu::*kind;  // the sum it adds to
    double seconds;
  };
  std::vector<Task> tasks;  // by tid
};
ThreadSample sample_threads();
ThreadCpu thread_cpu_between(const ThreadSample& before, const ThreadSample& after);

}  // namespace tutti::cli
