// SPDX-License-Identifier: Apache-2.0
#include "runtime/config.hpp"

#include <sched.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/error.hpp"
#include "common/units.hpp"

namespace tutti {

const std::vector<OptionInfo>& option_table() {
  static const std::vector<OptionInfo> table = {
      {"pool", "./tutti.pool", "pool file URI (file:///path?size=64G or a path); repeat, or comma-separate in TUTTI_POOL, to stripe"},
      {"capacity", "8G", "total size of newly created pool files without ?size="},
      {"chunk_tokens", "256", "tokens per stored chunk (any block size)"},
      {"partial_tokens", "16", "a store whose range ends inside a chunk also stores that chunk's tokens, in multiples of this, as a partial chunk (0: whole chunks only)"},
      {"backend", "auto", "auto | uring | posix | gpu-uring | cufile | dram | passthru | nvme (auto: nvme, else passthru, for a pool on NVMe in host memory; else uring, or dram for a pool on tmpfs)"},
      {"namespace", "", "salt mixed into every chunk key"},
      {"io_mode", "object", "object | per-block-baseline (one I/O per block and K/V; for comparison only)"},
      {"direct_to_blocks", "auto", "auto | on | off: vectored I/O straight between pool and KV blocks"},
      {"verify", "on", "on | unsafe-off: check every chunk-layer loaded against its checksum (off hands back corrupted bytes as success)"},
      {"staging", "256M", "bytes of aligned staging memory for loads (stores have half as much of their own)"},
      {"device_staging", "auto", "bytes of GPU memory that loads from and stores to host memory cross PCIe through by DMA, half each way (auto: 64M, or two chunk-layers if more; 0: the copy kernels read and write host memory over PCIe)"},
      {"dram_tier", "0", "bytes of host memory above the pool for recently moved chunk-layers (0: none)"},
      {"load_priority", "normal", "normal | high: the CUDA stream priority of a load's copy and checksum kernels and of gpu-uring's read kernels (high: their thread blocks go to the SMs before the engine's waiting ones)"},
      {"stream_wait", "host", "host | gpu: how tutti_batch_wait_layer_async waits outside CUDA graph capture (gpu: a spinning kernel; can deadlock, see tutti.h)"},
      {"lookahead", "4", "layers in flight ahead of the consumer"},
      {"rings", "4", "io_uring rings (one thread each; gpu-uring: one SQPOLL thread each, at most 8)"},
      {"queue_depth", "64", "I/Os in flight per ring"},
      {"sqpoll_idle_ms", "2", "gpu-uring: ms without submissions before a SQPOLL thread sleeps"},
      {"sqpoll_shared", "1", "gpu-uring: 1 = all rings share one SQPOLL thread (IORING_SETUP_ATTACH_WQ); 0 = one each"},
      {"gpu_uring_completions", "gpu", "gpu | cpu: who reaps gpu-uring's completions (gpu: each layer's read kernel polls the rings, resident on an SM until its reads are over; cpu: the kernel ends once its reads are submitted and gpu-uring's copier thread waits for them in io_uring_enter)"},
      {"async_reads", "auto", "auto | on | off: uring and gpu-uring reads go to io_uring's worker threads (auto: for pool files whose bytes the CPU copies: tmpfs, zram, brd, pmem)"},
      {"store_sums", "gpu", "gpu | cpu: who hashes a store from CUDA memory for its commit record (gpu: the gather's checksum kernel, from the same blocks; cpu: a thread reads the stored bytes again)"},
      {"threads", "auto", "posix, dram and cufile worker threads (auto: the CPUs this process may use less 4, from 4 to 16)"},
      {"store_nice", "19", "CPU nice (0-19) of the threads that write stores, so loads and the engine's threads come first"},
      {"load_timeout_ms", "0", "how long (ms) a load's wait for a layer waits before the load gives up: its chunks fail and no late byte reaches the blocks (0: as long as the reads take; not with gpu-uring)"},
      {"store_slack", "0", "while loads are in flight, a store's layer is also written when every load has at least this many layers in place beyond the one its engine computes (0: never; stores wait until no load is in flight)"},
      {"store_yield_ms", "0", "how long (ms) each write of a store not yet staged waits while loads are in flight; 0: it does not"},
      {"nvme_controller", "0", "nvme: tutti_kmod's controller number"},
      {"nvme_data_pointer", "auto", "nvme: auto (SGL where the controller has them) | sgl | prp"},
      {"create", "1", "1 | 0: create missing pool files"},
      {"ranks", "1", "runtimes that share the pool, one per tensor-parallel rank: each owns 1/ranks of its slots (fixed when the pool is created)"},
      {"rank", "0", "this runtime's rank among `ranks` (0 .. ranks-1): its share of the pool, and part of every chunk key"},
      {"kv_events", "0", "KV events (chunks stored and removed) kept for tutti_runtime_events (0: none)"},
      {"lookup_socket", "", "Unix socket path where the runtime answers lookups from other processes (tutti_lookup_client_open); empty: none"},
      {"remote", "", "the shared tier below the pool: a Redis Cluster, redis://host:port[,host:port...] (any of its nodes; empty: none)"},
      {"remote_timeout_ms", "200", "the deadline of every call to the remote tier: a chunk not answered by then is a miss"},
      {"remote_admit", "all", "all | twice: which chunks stored in the pool are written through to the remote tier (twice: those a lookup found again)"},
      {"remote_min_tokens", "0", "prefixes shorter than this many tokens are not written through to the remote tier"},
      {"remote_promote", "1", "1 | 0: copy chunks loaded from the remote tier into the local pool"},
      {"remote_connections", "1", "threads that load from the remote tier, a connection to each node each"},
  };
  return table;
}

std::string option_env_name(const std::string& key) {
  std::string s = "TUTTI_";
  for (char c : key) s += static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
  return s;
}

namespace {

const OptionInfo* find(const std::string& key) {
  for (auto& o : option_table())
    if (key == o.key) return &o;
  return nullptr;
}

uint64_t size_of(const std::string& key, const std::string& v, uint64_t min, uint64_t max) {
  auto n = parse_size(v);
  TUTTI_EXPECT(n && *n >= min && *n <= max,
               "option " + key + ": '" + v + "' is not a size in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return *n;
}

uint32_t count_of(const std::string& key, const std::string& v, uint32_t min, uint32_t max) {
  auto n = parse_uint(v);
  TUTTI_EXPECT(n && *n >= min && *n <= max,
               "option " + key + ": '" + v + "' is not an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return static_cast<uint32_t>(*n);
}

bool flag_of(const std::string& key, const std::string& v) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail(TUTTI_EINVAL, "option " + key + ": '" + v + "' is not 0 or 1");
}

// Where the reads cost CPU (zram decompresses in the reading thread), a thread on every core
// slows the engine's own threads: measured on 16 cores, 12 threads brought the layer-wise TTFT
// from zram closer to the compute-only floor than 16 did (docs/ttft.md). Four are left to them.
uint32_t auto_threads() {
  cpu_set_t set;
  const long cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : ::sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<uint32_t>(std::clamp<long>(cpus - 4, 4, 16));
}

// Parses one value into `c`; the same code checks set() input and resolves defaults.
void apply(Config& c, const std::string& key, const std::string& v) {
  if (key == "pool") {
    c.pools.push_back(parse_pool_uri(v));
  } else if (key == "capacity") {
    c.capacity = size_of(key, v, 1, UINT64_MAX);
  } else if (key == "chunk_tokens") {
    c.chunk_tokens = count_of(key, v, 1, 1u << 20);
  } else if (key == "partial_tokens") {
    c.partial_tokens = count_of(key, v, 0, 1u << 20);
  } else if (key == "backend") {
    try {
      c.backend = backend_named(v);
    } catch (const Error&) {
      fail(TUTTI_EINVAL, "option backend: '" + v + "' is not one of " + backend_names());
    }
  } else if (key == "namespace") {
    c.ns = v;
  } else if (key == "io_mode") {
    TUTTI_EXPECT(v == "object" || v == "per-block-baseline",
                 "option io_mode: '" + v + "' is not object or per-block-baseline");
    c.io_mode = v == "object" ? IoMode::kObject : IoMode::kPerBlockBaseline;
  } else if (key == "direct_to_blocks") {
    TUTTI_EXPECT(v == "auto" || v == "on" || v == "off", "option direct_to_blocks: '" + v + "' is not auto, on or off");
    c.direct = v == "auto" ? DirectMode::kAuto : v == "on" ? DirectMode::kOn : DirectMode::kOff;
  } else if (key == "verify") {
    // Turning checks off is spelled so that nobody does it by accident (a bare 0 is refused).
    TUTTI_EXPECT(v == "on" || v == "1" || v == "unsafe-off",
                 "option verify: '" + v + "' is not on or unsafe-off (without checks a corrupted pool hands back "
                 "wrong KV as success; say unsafe-off to accept that)");
    c.verify = v != "unsafe-off";
  } else if (key == "dram_tier") {
    c.dram_tier = size_of(key, v, 0, 1ull << 46);
  } else if (key == "staging") {
    c.staging = size_of(key, v, 4096, 1ull << 40);
  } else if (key == "device_staging") {
    c.device_staging = v == "auto" ? kDeviceStagingAuto : size_of(key, v, 0, 1ull << 40);
  } else if (key == "load_priority") {
    TUTTI_EXPECT(v == "normal" || v == "high", "option load_priority: '" + v + "' is not normal or high");
    c.high_load_priority = v == "high";
  } else if (key == "stream_wait") {
    TUTTI_EXPECT(v == "host" || v == "gpu", "option stream_wait: '" + v + "' is not host or gpu");
    c.gpu_waits = v == "gpu";
  } else if (key == "lookahead") {
    c.lookahead = count_of(key, v, 1, 1024);
  } else if (key == "rings") {
    c.rings = count_of(key, v, 1, 64);
  } else if (key == "queue_depth") {
    c.queue_depth = count_of(key, v, 1, 4096);
  } else if (key == "sqpoll_idle_ms") {
    c.sqpoll_idle_ms = count_of(key, v, 1, 60000);
  } else if (key == "sqpoll_shared") {
    TUTTI_EXPECT(v == "0" || v == "1", "option sqpoll_shared: '" + v + "' is not 0 or 1");
    c.sqpoll_shared = v == "1";
  } else if (key == "gpu_uring_completions") {
    TUTTI_EXPECT(v == "gpu" || v == "cpu", "option gpu_uring_completions: '" + v + "' is not gpu or cpu");
    c.gpu_completions = v == "gpu";
  } else if (key == "async_reads") {
    TUTTI_EXPECT(v == "auto" || v == "on" || v == "off", "option async_reads: '" + v + "' is not auto, on or off");
    c.async_reads = v == "auto" ? std::nullopt : std::optional<bool>(v == "on");
  } else if (key == "store_sums") {
    TUTTI_EXPECT(v == "cpu" || v == "gpu", "option store_sums: '" + v + "' is not cpu or gpu");
    c.gpu_sums = v == "gpu";
  } else if (key == "threads") {
    c.threads = v == "auto" ? auto_threads() : count_of(key, v, 1, 1024);
  } else if (key == "store_nice") {
    c.store_nice = count_of(key, v, 0, 19);
  } else if (key == "store_slack") {
    c.store_slack = count_of(key, v, 0, 1024);
  } else if (key == "store_yield_ms") {
    c.store_yield_ms = count_of(key, v, 0, 1000);
  } else if (key == "nvme_controller") {
    c.nvme_controller = count_of(key, v, 0, 1023);
  } else if (key == "nvme_data_pointer") {
    TUTTI_EXPECT(v == "auto" || v == "sgl" || v == "prp", "option nvme_data_pointer: '" + v + "' is not auto, sgl or prp");
    c.nvme_data_pointer = v;
  } else if (key == "create") {
    c.create = flag_of(key, v);
  } else if (key == "kv_events") {
    c.kv_events = count_of(key, v, 0, 1u << 24);
  } else if (key == "ranks") {
    c.ranks = count_of(key, v, 1, 65536);
  } else if (key == "rank") {
    c.rank = count_of(key, v, 0, 65535);
  } else if (key == "lookup_socket") {
    TUTTI_EXPECT(v.size() < sizeof(sockaddr_un{}.sun_path),
                 "option lookup_socket: '" + v + "' is longer than a Unix socket path may be (" +
                     std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes)");
    c.lookup_socket = v;
  } else if (key == "remote") {
    if (!v.empty()) {
      TUTTI_EXPECT(v.find_first_of(" \t\n") == std::string::npos && v.find(':') != std::string::npos,
                   "option remote: '" + v + "' is not redis://host:port[,host:port...]");
    }
    c.remote = v;
  } else if (key == "load_timeout_ms") {
    c.load_timeout_ms = count_of(key, v, 0, 3600000);
  } else if (key == "remote_timeout_ms") {
    c.remote_timeout_ms = count_of(key, v, 1, 600000);
  } else if (key == "remote_admit") {
    TUTTI_EXPECT(v == "all" || v == "twice", "option remote_admit: '" + v + "' is not all or twice");
    c.remote_admit = v == "all" ? 1 : 2;
  } else if (key == "remote_min_tokens") {
    c.remote_min_tokens = count_of(key, v, 0, UINT32_MAX);
  } else if (key == "remote_promote") {
    c.remote_promote = flag_of(key, v);
  } else if (key == "remote_connections") {
    c.remote_connections = count_of(key, v, 1, 64);
  } else {
    fail(TUTTI_EINVAL, "unknown option '" + key + "'");
  }
}

}  // namespace

void Options::set(const std::string& key, const std::string& value) {
  TUTTI_EXPECT(find(key) != nullptr, "unknown option '" + key + "' (see tutti.h for the keys)");
  Config probe;
  apply(probe, key, value);  // validate now, so the error points at this call
  if (key == "pool")
    pools_.push_back(value);
  else
    values_[key] = value;
}

Config Options::resolve() const {
  Config c;
  for (auto& o : option_table()) {
    const std::string key = o.key;
    if (key == "pool") continue;
    std::string v = o.default_value;
    if (auto it = values_.find(key); it != values_.end()) {
      v = it->second;
    } else if (const char* e = std::getenv(option_env_name(key).c_str()); e && *e) {
      v = e;
    }
    try {
      apply(c, key, v);
    } catch (const Error& err) {
      fail(err.code(), std::string(err.what()) + (values_.count(key) ? "" : " (from " + option_env_name(key) + ")"), err.site());
    }
  }
  std::vector<std::string> pools = pools_;
  if (pools.empty()) {
    std::string list = "./tutti.pool";
    if (const char* e = std::getenv("TUTTI_POOL"); e && *e) list = e;
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      if (comma > start) pools.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
  }
  for (auto& p : pools) apply(c, "pool", p);
  TUTTI_EXPECT(c.rank < c.ranks, "option rank: " + std::to_string(c.rank) + " is not below ranks (" +
                                     std::to_string(c.ranks) + ")");
  return c;
}

}  // namespace tutti
