// SPDX-License-Identifier: Apache-2.0
// The runtime: one pool, one registered KV cache, one backend, one scheduler.
// Held by shared_ptr so live batches keep it alive after the C handle is closed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "binding/kv_binding.hpp"
#include "binding/staging.hpp"
#include "common/histogram.hpp"
#include "datapath/backend.hpp"
#include "datapath/dram.hpp"
#include "datapath/dram_tier.hpp"
#include "datapath/gpu_uring.hpp"
#include "datapath/layer_path.hpp"
#include "index/index.hpp"
#include "index/kv_events.hpp"
#include "lookup/server.hpp"
#include "kernels/device.hpp"
#include "resolver/key.hpp"
#include "pool/pool.hpp"
#include "remote/tier.hpp"
#include "runtime/config.hpp"
#include "scheduler/scheduler.hpp"
#include "tutti.h"

namespace tutti {

class Batch;

struct Counters {
  IoCounters io;  // kept by the layer paths
  std::atomic<uint64_t> lookups{0}, hit_chunks{0}, miss_chunks{0}, stored_chunks{0}, failed_chunks{0}, layer_waits{0},
      layer_wait_ns{0}, load_timeouts{0};
  std::unique_ptr<std::atomic<uint64_t>[]> per_layer_wait_ns;
  Histogram layer_wait, load, store;  // tutti_histogram_kind
};

class Runtime {
 public:
  explicit Runtime(Config cfg);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  void register_kv(const tutti_kv_layout& layout);
  // tutti_runtime_close: waits for every submitted batch to end, then releases the pool (its
  // files and locks), the I/O threads and staging. Batches still alive may be read and
  // destroyed; anything that would move data again fails with TUTTI_ESTATE.
  void close();
  void require_open() const;
  // Submitted batches, counted so that close() can wait for them.
  void batch_started();
  void batch_ended();
  // Stores by layer in flight, which close() cancels: no engine declares layers after a close.
  void by_layer_started(Batch* b);
  void by_layer_ended(Batch* b);
  size_t lookup(const int32_t* tokens, size_t n, const void* salt, size_t salt_len);
  // lookup that pins what it found until release_lease(id) or, with ttl_ms > 0, until that
  // long has passed (expired leases are released before a store claims slots). Returns the
  // lease's id; *hit the cached tokens.
  uint64_t lookup_lease(const int32_t* tokens, size_t n, const void* salt, size_t salt_len, uint32_t ttl_ms,
                        size_t* hit);
  void release_lease(uint64_t id);  // an id released or expired before: nothing
  void expire_leases();
  const char* backend_name() const { return backend_name_.load(); }
  tutti_stats stats() const;
  std::vector<uint64_t> layer_wait_ns() const;
  void histogram(int kind, tutti_histogram* out) const;
  // KV events (option kv_events): null without them.
  KvEvents* events() { return events_.get(); }
  // The shared tier below the pool (option remote): null without one.
  remote::Tier* remote() { return remote_.get(); }

  // For batches and the scheduler; valid once registered.
  void require_registered() const;
  const Config& config() const { return cfg_; }
  Pool& pool() { return *pool_; }
  Index& index() { return *index_; }
  const KvBinding& binding() const { return *binding_; }
  // How a layer moves, chosen at register_kv.
  LayerPath& path(bool load) { return load ? *load_path_ : *store_path_; }
  Scheduler& scheduler() { return *scheduler_; }
  Counters& counters() { return counters_; }
  gpu::Device* device() { return device_.get(); }  // the KV cache is in CUDA memory
  Key root(const void* salt, size_t salt_len) const {
    return root_key(cfg_.ns, salt, salt_len, cfg_.rank, cfg_.ranks);
  }
  // The keys of the partial chunks that may follow the chunk keyed `parent`, whose tokens
  // (n of them, to the prompt's end) start at `tokens`: tokens [0, g), [0, 2g), ..., short of
  // a whole chunk and of n. None without partial chunks.
  std::vector<Key> tail_keys(const Key& parent, const int32_t* tokens, size_t n) const;
  // Counts a lookup of an n-token prompt that found `whole` chunks and a partial chunk of
  // `tail` granules; returns the hit in tokens.
  size_t count_lookup(size_t whole, size_t tail, size_t n);
  // With a remote tier: the local hit (`local` chunks of `keys`) counts as a sighting of its
  // chunks, and the number of chunks after it that the tier holds is returned. Else 0.
  size_t look_further(std::span<const Key> keys, size_t local);
  uint64_t torn_records() const { return torn_records_; }
  uint64_t next_load_epoch() { return ++load_epoch_; }

 private:
  Config cfg_;
  BackendKind opened_ = BackendKind::kPosix;    // the backend as resolved at open
  std::atomic<const char*> backend_name_{""};  // a static string; settled at register_kv
  std::mutex mu_;  // registration, close
  std::mutex running_mu_;
  std::condition_variable running_cv_;
  uint64_t running_ = 0;  // batches submitted and not ended
  std::mutex by_layer_mu_;
  std::set<Batch*> by_layer_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> registered_{false};  // set last by register_kv
  ReadsFirst reads_first_;  // outlives the store backend's threads and the scheduler
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<KvEvents> events_;  // outlives index_, which reports removals to it
  std::unique_ptr<Index> index_;
  std::unique_ptr<KvBinding> binding_;
  std::unique_ptr<gpu::Device> device_;
  std::unique_ptr<Staging> staging_, store_staging_;  // loads', stores'
  gpu::HostPin staging_pin_, store_staging_pin_;  // CUDA memory: staging mapped for the copy kernels
  std::unique_ptr<DramPool> dram_;  // outlives the backend, whose threads copy from it
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<void, void (*)(void*)> load_arena_{nullptr, gpu::free};  // HBM for load_staging_
  std::unique_ptr<Staging> load_staging_;
  std::unique_ptr<Backend> load_backend_;
  std::shared_ptr<DramTier> tier_;  // also held by the backends in front of which it sits
  std::unique_ptr<GpuUring> gpu_uring_;
  std::unique_ptr<LayerPath> load_path_, store_path_;
  std::unique_ptr<remote::Tier> remote_;  // uses the pool, index and binding; stopped before them
  std::unique_ptr<Scheduler> scheduler_;  // last: stopped first
  std::unique_ptr<LookupServer> lookup_server_;  // stopped before anything it asks goes
  uint64_t torn_records_ = 0;
  std::atomic<uint64_t> load_epoch_{0};  // numbers load batches for stream-ordered waits
  struct Lease {
    std::vector<uint64_t> slots;                    // pinned
    std::chrono::steady_clock::time_point deadline;  // max(): none
  };
  std::mutex leases_mu_;
  std::map<uint64_t, Lease> leases_;  // by id
  uint64_t next_lease_ = 0;
  Counters counters_;
};

}  // namespace tutti
