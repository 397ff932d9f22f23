// SPDX-License-Identifier: Apache-2.0
#include "common/log.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tutti {
namespace {

// TUTTI_LOG's level for stderr (TUTTI_DEBUG: debug), read once; -1: nothing.
int stderr_level() {
  static const int level = [] {
    const char* v = std::getenv("TUTTI_LOG");
    if (v && *v) {
      const char* names[] = {"error", "warn", "info", "debug"};
      for (int i = 0; i < 4; ++i)
        if (std::strcmp(v, names[i]) == 0) return i;
      return std::atoi(v) > 0 ? std::min(std::atoi(v), 3) : -1;
    }
    const char* d = std::getenv("TUTTI_DEBUG");
    return d && *d && std::strcmp(d, "0") != 0 ? TUTTI_LOG_DEBUG : -1;
  }();
  return level;
}

struct Sink {
  std::mutex mu;
  tutti_log_fn fn = nullptr;
  void* user = nullptr;
  std::atomic<int> level{-2};  // -2: no callback set, stderr_level() decides
};

Sink& sink() {
  static Sink s;
  return s;
}

int effective_level() {
  const int l = sink().level.load(std::memory_order_relaxed);
  return l == -2 ? stderr_level() : l;
}

const char* level_name(int level) {
  static const char* names[] = {"error", "warning", "info", "debug"};
  return level >= 0 && level <= 3 ? names[level] : "log";
}

}  // namespace

void set_log_callback(tutti_log_fn fn, void* user, int level) {
  Sink& s = sink();
  std::lock_guard lock(s.mu);
  s.fn = fn;
  s.user = user;
  s.level = fn ? level : -2;
}

bool log_enabled(int level) { return level <= effective_level(); }

void log(int level, const std::string& message) {
  if (!log_enabled(level)) return;
  Sink& s = sink();
  tutti_log_fn fn;
  void* user;
  {
    std::lock_guard lock(s.mu);
    fn = s.fn, user = s.user;
  }
  // Called without the lock: the callback may log through its own machinery, take its locks,
  // or be replaced meanwhile.
  if (fn)
    fn(level, message.c_str(), user);
  else
    std::fprintf(stderr, "tutti: %s: %s\n", level_name(level), message.c_str());
}

}  // namespace tutti
