// SPDX-License-Identifier: Apache-2.0
// What bench reports: a table for people or, with --json, one JSON object per line for scripts;
// its progress on stderr; and the error line of a failed C ABI call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tutti::cli {

// One line of results: a store or load by tutti, or the raw device figure it is compared with.
struct Row {
  size_t run = 0;
  std::string bench, backend, io_mode;
  bool direct = false;
  uint64_t bytes = 0;
  double seconds = 0, gbps = 0, ratio = 0, cpu_us_layer = 0, io_cpu_us_layer = 0, ios_layer = 0;
  double sched_us_layer = 0, sqpoll_us_layer = 0, workers_us_layer = 0;
  double cpu_s_per_gb = -1;    // CPU seconds of the whole process per GB moved; -1: not measured
  double tier_hit_ratio = -1;  // loads: share of chunk-layers the DRAM tier served; -1 without one
  bool verified = false;
  bool has_cpu = false;
};

struct Printer {
  Printer(bool json, bool quiet, const char* model, const char* memory, size_t tokens)
      : json(json), quiet(quiet), model(model), memory(memory), tokens(tokens) {}

  bool json = false;   // --json
  bool quiet = false;  // --quiet: no progress
  // What every JSON row repeats about the run.
  const char* model = "";
  const char* memory = "host";
  size_t tokens = 0;

  void header() const;  // the table's column names; nothing for JSON
  void row(const Row& r) const;

  // Progress on stderr: on a terminal one line redrawn in place, with a bar, the percent done
  // and the time left (from the pace so far, over `steps` of the whole command); piped, plain
  // words that end each run's line. Nothing with --quiet.
  void plan(size_t steps) const;
  void begin_run(const std::string& label) const;  // "[2/3] posix object"
  void step(const std::string& what) const;         // "load 2/3"
  void end_run(const std::string& outcome) const;   // "ok", "MISMATCH", "failed"

 private:
  void draw(const std::string& what) const;
  mutable size_t steps_ = 0, done_ = 0;
  mutable double start_ = 0;
  mutable std::string run_;
};

// s as a JSON string literal, quotes included.
std::string json_string(const std::string& s);

// Prints "tutti: <what>: <strerror> (<tutti_last_error>)" on stderr for a C ABI call that
// returned `rc`, and returns 2, the exit status for it.
int call_failed(const char* what, int rc);

}  // namespace tutti::cli
