// SPDX-License-Identifier: Apache-2.0
#include "clock.hpp"

#include <dirent.h>
#include <sys/resource.h>

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

ThreadCpu thread_cpu_by_kind() {
  ThreadCpu out;
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
    f = std::fopen((task + "/schedstat").c_str(), "r");
    if (!f) continue;
    got = got && std::fgets(stat, sizeof stat, f) != nullptr;
    std::fclose(f);
    if (!got) continue;
    const double sec = std::strtod(stat, nullptr) * 1e-9;
    const std::string name(comm);
    if (name.rfind("tutti-sched", 0) == 0 || name.rfind("tutti-waker", 0) == 0) out.sched += sec;
    else if (name.rfind("iou-sqp", 0) == 0) out.sqpoll += sec;
  }
  ::closedir(d);
  return out;
}

}  // namespace tutti::cli
