// SPDX-License-Identifier: Apache-2.0
// The pieces of `tutti bench`: its options, the synthetic KV cache it stores and loads, the raw
// device measurement every figure is compared with, and one store + load through the C ABI.
// bench.cpp parses the command line and runs them for each backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "output.hpp"
#include "tutti.h"

namespace tutti::cli {

struct Model {
  const char* name;
  uint32_t layers, heads, head_dim, elem_bytes;
};
inline constexpr Model kModels[] = {
    {"llama3-8b", 32, 8, 128, 2},  {"llama3-70b", 80, 8, 128, 2}, {"qwen2.5-7b", 28, 4, 128, 2},
    {"mistral-7b", 32, 8, 128, 2}, {"tiny", 2, 2, 64, 2},
};

struct BenchArgs {
  const Model* model = &kModels[0];
  size_t tokens = 8192;
  size_t requests = 1;
  std::string pool = "./tutti-bench.pool";
  std::vector<std::string> backends;
  bool backends_given = false;  // --backends: a backend that cannot run is an error
  bool baseline = true;
  std::string direct = "auto";
  std::string dram_tier;  // --dram-tier: a DRAM tier of this size above the pool
  uint32_t block_tokens = 16;
  uint32_t chunk_tokens = 256;
  bool hnd = false;
  bool json = false;
  bool keep = false;
  bool quiet = false;
  unsigned repeat = 3;
  bool cuda = false;
  // --remote URI: measure the shared tier's cluster instead (bench_remote.cpp)
  std::string remote;
  unsigned remote_connections = 4;
  unsigned remote_depth = 8;
  unsigned remote_timeout_ms = 2000;
};

// tutti bench --remote: SET and GET of chunk-layer values on a Redis Cluster.
int run_remote_bench(const BenchArgs& a);

// The synthetic KV cache: one fused tensor per layer [2, blocks, block_tokens, heads, head_dim]
// (or HND), filled with a pattern that is a function of (layer, K/V, logical block, word), so a
// byte that lands in the wrong place is caught.
class KvCache {
 public:
  explicit KvCache(const BenchArgs& a);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  tutti_kv_layout layout() const;
  void fill();
  void clear();
  bool verify();

  uint64_t bytes() const { return layer_bytes_ * a_.model->layers; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& table() const { return table_; }

 private:
  std::byte* host(uint32_t l) { return device_mem_ ? host_layer_.data() : static_cast<std::byte*>(bases_[l]); }
  template <class Fn>
  bool walk(uint32_t l, std::byte* layer, Fn fn);

  const BenchArgs& a_;
  uint32_t blocks_ = 0;
  uint64_t block_bytes_ = 0, layer_bytes_ = 0;
  AlignedBuffer mem_, host_layer_;
  std::byte* device_mem_ = nullptr;
  std::vector<void*> bases_;
  std::vector<int32_t> table_, tokens_;
};

// Is the directory of this pool URI on tmpfs (where the dram backend can keep it)?
bool on_tmpfs(const std::string& pool);

// How the raw figure moves bytes: `threads` threads, each with an io_uring ring holding `depth`
// I/Os of `io` bytes in flight, or each doing one pread/pwrite at a time, or (a file on tmpfs)
// one memcpy at a time to or from the file mapped.
struct RawSetting {
  enum Method { kUring, kSync, kMmap } method = kUring;
  bool write = false;
  unsigned threads = 4, depth = 32;
  uint64_t io = 1 << 20;
  const char* method_name() const;  // uring, pread or pwrite, memcpy
  std::string label() const;        // "uring-1MiB-4x32", "pwrite-256KiB-16"
};

struct RawMeasure {
  double gbps = 0;
  double cpu_s = 0;  // of the whole process, kernel time included
};

// Raw O_DIRECT bandwidth of a byte range of the pool file, the device figure every ratio refers
// to: plain sequential I/O with no KV logic at all, writes of incompressible bytes followed by
// one fdatasync (and msync).
RawMeasure raw_bandwidth(const std::string& path, uint64_t offset, uint64_t bytes, const RawSetting& s);

// The settings at which the device moves the range fastest (bench_raw.cpp says which are tried).
RawSetting best_raw_setting(const std::string& path, uint64_t offset, uint64_t bytes, bool write);

// Every run measures the device on its own pool, right before tutti touches it: a raw write of
// the region the store will write, a raw read of what the store wrote right before the load,
// both at the best settings that the first run's sweep found. Each ratio compares figures
// taken seconds apart on the same bytes (shared disks drift). Each raw figure is the second of
// two passes: a virtual disk is markedly faster on bytes it has seen once (host caching, thin
// provisioning), and tutti always meets them second.
struct RawFigures {
  RawMeasure read, write;
  uint64_t bytes = 0;
  std::optional<RawSetting> read_at, write_at;  // swept once, kept for later runs
};

// Into CUDA memory: pinned host memory into HBM by cudaMemcpyAsync, the ceiling of every load
// from host memory (the link, or the copy engines). The best of pieces x streams, the best
// with pieces of one chunk-layer, the size tutti's DMAs into device staging have, and the best
// with chunk-layer pieces one piece apart in host memory (in a pool, neighbouring slots' lie a
// slot apart), up to 16 MiB of them in each 2D copy: what merging a layer's DMAs would reach.
struct H2dFigures {
  double gbps = 0, extents_gbps = 0, rows_gbps = 0;
  std::string at, extents_at, rows_at;  // "copy-16MiB-2x"
  uint64_t bytes = 0;
};
H2dFigures h2d_bandwidth(uint64_t extent);

struct RunResult {
  Row store, load;
  uint64_t data_offset = 0, data_bytes = 0;
  std::string path;
  int rc = 0;
  std::string unsupported;  // why this backend cannot run here (open or register said so)
};

// One store + load of the whole cache with one backend and I/O mode, on a fresh pool.
RunResult run_once(const BenchArgs& a, const Printer& print, KvCache& kv, const std::string& backend,
                   const char* io_mode, RawFigures* raw);

}  // namespace tutti::cli
