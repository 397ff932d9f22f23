// SPDX-License-Identifier: Apache-2.0
#include "output.hpp"

#include <cinttypes>
#include <cstdio>

#include "tutti.h"

namespace tutti::cli {

void Printer::header() const {
  if (json) return;
  std::printf("%-10s %-9s %-20s %8s %7s %12s %14s %14s %15s %10s %s\n", "bench", "backend", "io_mode", "GB/s", "x raw",
              "cpu us/layer", "io cpu us/layer", "sched us/layer", "sqpoll us/layer", "I/Os/layer", "verified");
}

void Printer::row(const Row& r) const {
  if (json) {
    std::printf(
        "{\"run\":%zu,\"bench\":\"%s\",\"backend\":\"%s\",\"io_mode\":\"%s\",\"memory\":\"%s\",\"direct\":%s,\"model\":\"%s\",\"tokens\":%zu,"
        "\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.3f,\"ratio_to_raw\":%.3f,\"cpu_us_per_layer\":%s,"
        "\"io_cpu_us_per_layer\":%s,\"sched_cpu_us_per_layer\":%s,\"sqpoll_cpu_us_per_layer\":%s,"
        "\"ios_per_layer\":%s,\"tier_hit_ratio\":%s,\"verified\":%s}\n",
        r.run, r.bench.c_str(), r.backend.c_str(), r.io_mode.c_str(), memory, r.direct ? "true" : "false",
        model, tokens,
        r.bytes, r.seconds, r.gbps, r.ratio, r.has_cpu ? std::to_string(r.cpu_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.io_cpu_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.sched_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.sqpoll_us_layer).c_str() : "null",
        r.has_cpu ? std::to_string(r.ios_layer).c_str() : "null",
        r.tier_hit_ratio >= 0 ? std::to_string(r.tier_hit_ratio).c_str() : "null", r.verified ? "true" : "false");
  } else {
    if (!r.has_cpu)
      std::printf("%-10s %-9s %-20s %8.2f %7.2f %12s %14s %14s %15s %10s %s\n", r.bench.c_str(), r.backend.c_str(),
                  r.io_mode.c_str(), r.gbps, r.ratio, "-", "-", "-", "-", "-", "-");
    else
      std::printf("%-10s %-9s %-20s %8.2f %7.2f %12.1f %14.1f %14.1f %15.1f %10.0f %s\n", r.bench.c_str(),
                  r.backend.c_str(), r.io_mode.c_str(), r.gbps, r.ratio, r.cpu_us_layer, r.io_cpu_us_layer,
                  r.sched_us_layer, r.sqpoll_us_layer, r.ios_layer, r.verified ? "yes" : "NO");
  }
  std::fflush(stdout);
}

void Printer::progress(const std::string& s) const {
  if (quiet) return;
  std::fputs(s.c_str(), stderr);
  std::fflush(stderr);
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
  std::fprintf(stderr, "tutti: %s: %s (%s)\n", what, tutti_strerror(rc), tutti_last_error());
  return 2;
}

}  // namespace tutti::cli
