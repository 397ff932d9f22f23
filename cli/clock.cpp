// SPDX-License-Identifier: Apache-2.0
#include "clock.hpp"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace tutti::cli {

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double process_cpu_s() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

ThreadSample sample_threads() {
  ThreadSample out;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    char comm[32] = {}, stat[128] = {};
    FILE* f = std::fopen((task + "/comm").c_str(), "r");
    if (!f) continue;
    bool got = std::fgets(comm, sizeof comm, f) != nullptr;
    std::fclose(f);
    const std::string name(comm);
    double ThreadCpu::*kind = nullptr;
    if (name.rfind("tutti-sched", 0) == 0 || name.rfind("tutti-waker", 0) == 0 || name.rfind("tutti-copier", 0) == 0)
      kind = &ThreadCpu::sched;
    else if (name.rfind("iou-sqp", 0) == 0) kind = &ThreadCpu::sqpoll;
    else if (name.rfind("iou-wrk", 0) == 0) kind = &ThreadCpu::workers;
    if (!got || !kind) continue;
    f = std::fopen((task + "/schedstat").c_str(), "r");
    if (!f) continue;
    got = std::fgets(stat, sizeof stat, f) != nullptr;
    std::fclose(f);
    if (got) out.tasks.push_back({std::strtol(e->d_name, nullptr, 10), kind, std::strtod(stat, nullptr) * 1e-9});
  }
  ::closedir(d);
  std::sort(out.tasks.begin(), out.tasks.end(), [](const auto& a, const auto& b) { return a.tid < b.tid; });
  return out;
}

ThreadCpu thread_cpu_between(const ThreadSample& before, const ThreadSample& after) {
  ThreadCpu out;
  auto b = before.tasks.begin();
  for (const auto& t : after.tasks) {
    while (b != before.tasks.end() && b->tid < t.tid) ++b;
    const double since = b != before.tasks.end() && b->tid == t.tid ? b->seconds : 0;  // 0: born between
    out.*t.kind += t.seconds - since;
  }
  return out;
}

}  // namespace tutti::cli
