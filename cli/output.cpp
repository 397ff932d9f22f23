// SPDX-License-Identifier: Apache-2.0
#include "output.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "tutti.h"

namespace tutti::cli {

void Printer::header() const {
  if (json) return;
  std::printf("%-10s %-9s %-20s %8s %7s %8s %12s %14s %14s %15s %14s %10s %s\n", "bench", "backend", "io_mode", "GB/s",
              "x raw", "cpu s/GB", "cpu us/layer", "io cpu us/layer", "sched us/layer", "sqpoll us/layer", "io-wq us/layer",
              "I/Os/layer", "verified");
}

void Printer::row(const Row& r) const {
  if (json) {
    std::printf(
        "{\"run\":%zu,\"bench\":\"%s\",\"backend\":\"%s\",\"io_mode\":\"%s\",\"memory\":\"%s\",\"direct\":%s,\"model\":\"%s\",\"tokens\":%zu,"
        "\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.3f,\"ratio_to_raw\":%.3f,\"cpu_us_per_layer\":%s,"
        "\"io_cpu_us_per_layer\":%s,\"sched_cpu_us_per_layer\":%s,\"sqpoll_cpu_us_per_layer\":%s,"
        "\"workers_cpu_us_per_layer\":%s,\"ios_per_layer\":%s,\"cpu_s_per_gb\":%s,\"tier_hit_ratio\":%s,\"verified\":%s}\n",
        r.run, r.bench.c_str(), r.backend.c_str(), r.io_mode.c_str(), memory, r.direct ? "true" : "false",
        model, tokens,
        r.bytes, r.seconds, r.gbps, r.ratio, r.has_cpu ? std::to_string(r.cpu_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.io_cpu_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.sched_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.sqpoll_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.workers_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.ios_layer).c_str() : "null",
        r.cpu_s_per_gb >= 0 ? std::to_string(r.cpu_s_per_gb).c_str() : "null",
        r.tier_hit_ratio >= 0 ? std::to_string(r.tier_hit_ratio).c_str() : "null", r.verified ? "true" : "false");
  } else {
    char per_gb[16] = "-";
    if (r.cpu_s_per_gb >= 0) std::snprintf(per_gb, sizeof per_gb, "%.3f", r.cpu_s_per_gb);
    if (!r.has_cpu)
      std::printf("%-10s %-9s %-20s %8.2f %7.2f %8s %12s %14s %14s %15s %14s %10s %s\n", r.bench.c_str(), r.backend.c_str(),
                  r.io_mode.c_str(), r.gbps, r.ratio, per_gb, "-", "-", "-", "-", "-", "-", "-");
    else
      std::printf("%-10s %-9s %-20s %8.2f %7.2f %8s %12.1f %14.1f %14.1f %15.1f %14.1f %10.0f %s\n", r.bench.c_str(),
                  r.backend.c_str(), r.io_mode.c_str(), r.gbps, r.ratio, per_gb, r.cpu_us_layer, r.io_cpu_us_layer,
                  r.sched_us_layer, r.sqpoll_us_layer, r.workers_us_layer, r.ios_layer, r.verified ? "yes" : "NO");
  }
  std::fflush(stdout);
}

namespace {

bool g_line_open = false;  // a progress line on stderr waits for its end

bool on_terminal() {
  static const bool tty = ::isatty(STDERR_FILENO) == 1;
  return tty;
}

double now_s() {
  timespec t;
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

void Printer::plan(size_t steps) const {
  steps_ = steps, done_ = 0, start_ = now_s();
}

void Printer::begin_run(const std::string& label) const {
  run_ = label;
  if (quiet) return;
  if (on_terminal()) {
    draw("starting");
  } else {
    std::fprintf(stderr, "%s:", label.c_str());
    g_line_open = true;
  }
  std::fflush(stderr);
}

void Printer::step(const std::string& what) const {
  if (!quiet) {
    if (on_terminal())
      draw(what);
    else
      std::fprintf(stderr, " %s...", what.c_str());
    std::fflush(stderr);
  }
  ++done_;
}

void Printer::end_run(const std::string& outcome) const {
  if (quiet) return;
  if (on_terminal())
    std::fprintf(stderr, "\r\033[K%s: %s\n", run_.c_str(), outcome.c_str());  // the bar gives way
  else
    std::fprintf(stderr, " %s\n", outcome.c_str());
  g_line_open = false;
  std::fflush(stderr);
}

void Printer::draw(const std::string& what) const {
  constexpr int kWidth = 24;
  const double frac = steps_ ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(steps_)) : 0;
  std::string bar(static_cast<size_t>(frac * kWidth), '#');
  bar.resize(kWidth, '.');
  char eta[32] = "";
  if (done_ > 0 && frac < 1) {
    const auto left = static_cast<long>((now_s() - start_) / static_cast<double>(done_) * static_cast<double>(steps_ - done_));
    std::snprintf(eta, sizeof eta, "  ETA %ld:%02ld", left / 60, left % 60);
  }
  std::fprintf(stderr, "\r\033[K[%s] %3.0f%%%s  %s: %s", bar.c_str(), frac * 100, eta, run_.c_str(), what.c_str());
  g_line_open = true;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int call_failed(const char* what, int rc) {
  if (g_line_open) std::fputc('\n', stderr);  // below the progress line, not inside it
  g_line_open = false;
  std::fprintf(stderr, "tutti: %s: %s (%s)\n", what, tutti_strerror(rc), tutti_last_error());
  return 2;
}

}  // namespace tutti::cli
