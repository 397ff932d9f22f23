// SPDX-License-Identifier: Apache-2.0
// Runtime options: string keys with documented defaults, each overridable by TUTTI_<KEY>.
// The single table in config.cpp is the source of truth for keys, defaults and help text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "datapath/backend.hpp"
#include "resolver/uri.hpp"

namespace tutti {

enum class IoMode { kObject, kPerBlockBaseline };
enum class DirectMode { kAuto, kOn, kOff };

constexpr uint64_t kDeviceStagingAuto = ~uint64_t{0};

struct Config {
  std::vector<PoolUri> pools;
  uint64_t capacity = 0;
  uint32_t chunk_tokens = 0;
  uint32_t partial_tokens = 0;  // granule of partial chunks; 0 (or >= chunk_tokens): none
  // The granule of partial chunks in effect: 0 when there are none (the per-block baseline
  // moves whole chunks only).
  uint32_t partial_granule() const {
    return partial_tokens < chunk_tokens && io_mode == IoMode::kObject ? partial_tokens : 0;
  }
  BackendKind backend = BackendKind::kAuto;
  std::string ns;
  IoMode io_mode = IoMode::kObject;
  DirectMode direct = DirectMode::kAuto;
  bool verify = true;  // option verify: on, or unsafe-off
  uint64_t staging = 0;
  uint64_t device_staging = 0;  // or kDeviceStagingAuto
  bool gpu_waits = false;  // option stream_wait: host, or gpu
  bool high_load_priority = false;  // option load_priority: normal, or high
  uint64_t dram_tier = 0;
  uint32_t lookahead = 0;
  uint32_t rings = 0;
  uint32_t queue_depth = 0;
  uint32_t sqpoll_idle_ms = 0;
  bool sqpoll_shared = false;
  bool gpu_completions = true;  // option gpu_uring_completions: gpu, or cpu
  std::optional<bool> async_reads;  // option async_reads: on, off, or auto (empty: by pool file)
  bool gpu_sums = true;             // option store_sums: gpu, or cpu
  uint32_t threads = 0;
  uint32_t store_nice = 0;
  uint32_t store_slack = 0;     // the scheduler's: layers every load must have ahead of its engine
  uint32_t store_yield_ms = 0;  // ReadsFirst's bound
  uint32_t load_timeout_ms = 0;  // a wait for a loaded layer gives up after this; 0: never
  uint32_t nvme_controller = 0;
  std::string nvme_data_pointer;
  bool create = true;
  uint32_t ranks = 1;  // runtimes sharing the pool
  uint32_t rank = 0;   // this one's share
  uint32_t kv_events = 0;  // events kept for tutti_runtime_events; 0: none
  std::string lookup_socket;  // "": no lookup service
  std::string remote;         // the shared tier's cluster; "": none
  uint32_t remote_timeout_ms = 0;
  uint32_t remote_admit = 1;  // sightings before a chunk is written through: all 1, twice 2
  uint64_t remote_min_tokens = 0;
  bool remote_promote = true;
  uint32_t remote_connections = 1;
};

struct OptionInfo {
  const char* key;
  const char* default_value;
  const char* help;
};
const std::vector<OptionInfo>& option_table();
std::string option_env_name(const std::string& key);  // "queue_depth" -> "TUTTI_QUEUE_DEPTH"

// Options as given; resolve() applies environment variables and defaults, and validates.
class Options {
 public:
  // Throws EINVAL for an unknown key or a value that does not parse.
  void set(const std::string& key, const std::string& value);
  Config resolve() const;

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> pools_;
};

}  // namespace tutti
