// SPDX-License-Identifier: Apache-2.0
#include "runtime/runtime.hpp"

#include <chrono>
#include <cstdio>

#include "common/error.hpp"
#include "common/log.hpp"
#include "datapath/cufile.hpp"
#include "datapath/dram_tier.hpp"
#include "nvme/nvme_backend.hpp"
#include "nvme/passthru_backend.hpp"
#include "runtime/batch.hpp"
#include "runtime/plan.hpp"

namespace tutti {

Runtime::Runtime(Config cfg) : cfg_(std::move(cfg)) {
  TUTTI_EXPECT(!cfg_.pools.empty(), "no pool location given");
  opened_ = resolve_backend(cfg_.backend);  // fails at once for a backend this machine lacks
  backend_name_ = tutti::backend_name(opened_);
}

Runtime::~Runtime() {
  lookup_server_.reset();
  scheduler_.reset();  // drains queued batches
  remote_.reset();     // finishes its write-throughs
  gpu_uring_.reset();  // waits for the GPU's layers in flight
  load_backend_.reset();
  backend_.reset();    // joins I/O threads
  dram_.reset();       // unpins the mapped pool
}

void Runtime::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  lookup_server_.reset();  // its clients' next calls fail with TUTTI_EIO
  {
    // A batch leaves the set before it ends, so none is freed while cancelled here.
    std::lock_guard b(by_layer_mu_);
    for (Batch* s : by_layer_) s->cancel();
  }
  {
    std::unique_lock r(running_mu_);
    running_cv_.wait(r, [&] { return running_ == 0; });
  }
  // The same order as the destructor; the device, index and binding stay for the batches
  // that outlive the handle (their results, their pinned descriptors).
  scheduler_.reset();
  remote_.reset();  // finishes its write-throughs, which read the pool
  load_path_.reset();
  store_path_.reset();
  gpu_uring_.reset();
  load_backend_.reset();
  backend_.reset();
  tier_.reset();
  load_staging_.reset();
  load_arena_.reset();
  staging_pin_.reset();
  staging_.reset();
  store_staging_pin_.reset();
  store_staging_.reset();
  dram_.reset();
  pool_.reset();
}

void Runtime::require_open() const {
  TUTTI_EXPECT_CODE(!closed_, TUTTI_ESTATE, "the runtime was closed (tutti_runtime_close)");
}

void Runtime::batch_started() {
  std::lock_guard r(running_mu_);
  ++running_;
}

void Runtime::by_layer_started(Batch* b) {
  std::lock_guard lock(by_layer_mu_);
  by_layer_.insert(b);
}

void Runtime::by_layer_ended(Batch* b) {
  std::lock_guard lock(by_layer_mu_);
  by_layer_.erase(b);
}

void Runtime::batch_ended() {
  {
    std::lock_guard r(running_mu_);
    --running_;
  }
  running_cv_.notify_all();
}

void Runtime::require_registered() const {
  TUTTI_EXPECT_CODE(registered_.load(std::memory_order_acquire), TUTTI_ESTATE,
                    "no KV cache registered (call tutti_runtime_register_kv first)");
}

void Runtime::register_kv(const tutti_kv_layout& layout) {
  std::lock_guard lock(mu_);
  TUTTI_EXPECT_CODE(binding_ == nullptr, TUTTI_ESTATE, "a KV cache is already registered with this runtime");
  auto binding = std::make_unique<KvBinding>(layout, cfg_.chunk_tokens);
  const Shape& shape = binding->shape();

  Plan plan = make_plan(cfg_, opened_, *binding);
  std::unique_ptr<gpu::Device> device;
  if (binding->on_device()) {
    device = std::make_unique<gpu::Device>(binding->device(), cfg_.high_load_priority);
    device->set_layers(shape.layers);
    device->set_staging(cfg_.device_staging == kDeviceStagingAuto ? std::max<uint64_t>(64 << 20, 2 * shape.layer_bytes())
                                                                  : cfg_.device_staging,
                        shape.layer_bytes());
    device->set_gpu_waits(cfg_.gpu_waits);
    for (uint32_t l = 0; l < shape.layers; ++l)
      TUTTI_EXPECT(device->owns(binding->k(l)) && device->owns(binding->v(l)),
                   "layer " + std::to_string(l) + ": K/V are not memory of CUDA device " +
                       std::to_string(binding->device()));
  }
  PoolOptions po;
  po.uris = cfg_.pools;
  po.capacity = cfg_.capacity;
  po.create = cfg_.create;
  po.ranks = cfg_.ranks;
  po.rank = cfg_.rank;
  auto pool = Pool::open(po, shape);
  // The lookup service, bound once the pool is this runtime's (a second runtime on it failed
  // above); until register_kv returns its clients are told TUTTI_ESTATE.
  std::unique_ptr<LookupServer> lookup_server;
  if (!cfg_.lookup_socket.empty()) {
    auto salt_of = [](std::span<const std::byte> s) { return s.empty() ? nullptr : s.data(); };
    LookupServer::Handlers h;
    h.lookup = [this, salt_of](std::span<const int32_t> tokens, std::span<const std::byte> salt) {
      return lookup(tokens.data(), tokens.size(), salt_of(salt), salt.size());
    };
    h.lease = [this, salt_of](std::span<const int32_t> tokens, std::span<const std::byte> salt, uint32_t ttl_ms,
                              size_t* hit) {
      return lookup_lease(tokens.data(), tokens.size(), salt_of(salt), salt.size(), ttl_ms, hit);
    };
    h.release = [this](uint64_t id) { release_lease(id); };
    lookup_server = std::make_unique<LookupServer>(cfg_.lookup_socket, std::move(h));
  }
  BackendConfig bc;
  for (size_t i = 0; i < pool->files(); ++i) {
    bc.fds.push_back(pool->file(i).fd.get());
    bc.async_reads.push_back(cfg_.async_reads.value_or(pool->file(i).cpu_moved));
  }
  bc.rings = cfg_.rings;
  bc.queue_depth = cfg_.queue_depth;
  bc.sqpoll_idle_ms = cfg_.sqpoll_idle_ms;
  bc.sqpoll_shared = cfg_.sqpoll_shared;
  bc.gpu_completions = cfg_.gpu_completions;
  bc.threads = cfg_.threads;
  bc.nvme_controller = cfg_.nvme_controller;
  bc.nvme_data_pointer = cfg_.nvme_data_pointer;
  settle_plan(plan, cfg_, *binding, *pool, bc);
  const BackendKind b = plan.backend;

  auto index = std::make_unique<Index>(pool->owned().count, pool->owned().first);
  std::unique_ptr<KvEvents> events;
  if (cfg_.kv_events) {
    events = std::make_unique<KvEvents>(cfg_.kv_events);
    index->on_removed([ev = events.get()](const Key& k) { ev->removed(k); });
  }
  auto stale = index->recover(pool->read_records(&torn_records_));
  pool->write_tombstones(stale);

  // The DRAM tier above the pool (in front of the CPU producers, below), which the shared tier
  // below the pool must tell of the slots it writes.
  std::shared_ptr<DramTier> tier;
  if (cfg_.dram_tier) tier = std::make_shared<DramTier>(cfg_.dram_tier, shape.layer_bytes());

  // The shared tier below the pool; its parts keep their addresses when moved into the runtime.
  std::unique_ptr<remote::Tier> remote_tier;
  if (!cfg_.remote.empty()) {
    remote::TierOptions ro;
    ro.uri = cfg_.remote;
    ro.timeout = std::chrono::milliseconds(cfg_.remote_timeout_ms);
    ro.admit_sightings = cfg_.remote_admit;
    ro.min_tokens = cfg_.remote_min_tokens;
    ro.promote = cfg_.remote_promote;
    ro.connections = cfg_.remote_connections;
    remote_tier = remote::make_tier(ro, remote::TierParts{index.get(), pool.get(), binding.get(), device.get(), tier.get()});
  }

  std::unique_ptr<DramPool> dram_pool;
  if (b == BackendKind::kDram) dram_pool = std::make_unique<DramPool>(*pool, device.get());

  // Staging buffers hold one I/O each: a chunk-layer extent, or one block's K or V. The copy
  // kernels of mapped-cuda need none: they read and write the mapped pool itself. With vectored
  // I/O into the blocks, only the chunks that do not move whole (a range that starts or ends
  // inside one, or starts inside a block) go through staging: a few buffers are enough.
  // Stores have staging of their own, half as much, so a load never waits for buffers that a
  // store's writes hold: at their nice level, on a device that spends CPU per write (zram),
  // those are slow to come back (docs/ttft.md).
  std::unique_ptr<Staging> staging, store_staging;
  gpu::HostPin staging_pin, store_staging_pin;  // a registration that fails below leaves nothing pinned
  if (plan.load != PathKind::kMappedCuda) {
    const uint64_t op_bytes =
        cfg_.io_mode == IoMode::kObject ? shape.layer_bytes() : shape.token_bytes() * binding->block_tokens();
    const uint64_t bytes = plan.direct && !cfg_.load_timeout_ms ? std::min(cfg_.staging, 16 * op_bytes) : cfg_.staging;
    staging = std::make_unique<Staging>(std::max(bytes, op_bytes), op_bytes);
    store_staging = std::make_unique<Staging>(std::max(bytes / 2, op_bytes), op_bytes);
    // The copy kernels read and write staging in place, over PCIe.
    if (device) {
      staging_pin = gpu::HostPin(*device, staging->arena(), staging->arena_bytes());
      staging->set_device_base(staging_pin.device_address());
      store_staging_pin = gpu::HostPin(*device, store_staging->arena(), store_staging->arena_bytes());
      store_staging->set_device_base(store_staging_pin.device_address());
    }
  }
  if (staging) bc.staging = staging->regions();

  // The CPU producers: one for the stores of every path but mapped-cuda, its threads niced, and
  // one of the same kind for the loads of the host paths and staged-cuda (uring, posix, dram in
  // host memory), so a load never queues behind a store's I/O nor yields the CPU to it.
  reads_first_.set_max_wait(std::chrono::milliseconds(cfg_.store_yield_ms));
  auto cpu_backend = [&](bool stores) {
    BackendConfig c = bc;
    c.stores = stores;
    c.nice = stores ? static_cast<int>(cfg_.store_nice) : 0;
    if (stores && store_staging) c.staging = store_staging->regions();
    return b == BackendKind::kDram ? make_dram_backend(c, *dram_pool)
                                   : make_backend(plan.uring_stores ? BackendKind::kUring : b, c);
  };
  auto backend = cpu_backend(true);
  // Loads of their own: passthru and nvme into staging; cufile into staging in HBM, which the
  // copy kernel scatters from; gpu-uring and mapped-cuda need no CPU producer.
  std::unique_ptr<void, void (*)(void*)> load_arena{nullptr, gpu::free};
  std::unique_ptr<Staging> load_staging;
  std::unique_ptr<Backend> load_backend;
  if (b == BackendKind::kPassthru) load_backend = make_passthru_backend(bc);
  if (b == BackendKind::kNvme) load_backend = make_nvme_backend(bc);
  if (!plan.uring_stores && plan.load != PathKind::kMappedCuda) load_backend = cpu_backend(false);
  if (b == BackendKind::kCufile) {
    const uint64_t bytes = Staging::arena_bytes_for(std::max(cfg_.staging, shape.layer_bytes()), shape.layer_bytes());
    load_arena.reset(gpu::alloc(binding->device(), bytes));
    load_staging = std::make_unique<Staging>(bytes, shape.layer_bytes(), static_cast<std::byte*>(load_arena.get()));
    load_backend = make_cufile_backend(bc, load_arena.get(), bytes);
  }
  // The DRAM tier goes in front of the CPU producers, for stores (write-through) and loads.
  if (tier) {
    const unsigned copiers = std::min(cfg_.threads, 8u);
    backend = make_tiered_backend(std::move(backend), tier, copiers);
    if (load_backend) load_backend = make_tiered_backend(std::move(load_backend), tier, copiers);
  }
  std::unique_ptr<GpuUring> gu;
  if (b == BackendKind::kGpuUring) gu = std::make_unique<GpuUring>(*device, bc);

  PathParts store;
  store.kv = binding.get();
  store.pool = pool.get();
  store.backend = backend.get();
  store.staging = store_staging.get();
  store.tier = tier.get();
  store.device = device.get();
  store.dram = dram_pool.get();
  store.counters = &counters_.io;
  store.verify = cfg_.verify;
  store.direct = plan.direct;
  store.lookahead = cfg_.lookahead;
  store.reads_first = &reads_first_;
  store.async_reads = bc.async_reads;
  store.gpu_sums = cfg_.gpu_sums;
  PathParts load = store;
  load.staging = load_staging ? load_staging.get() : staging.get();
  if (load_backend) load.backend = load_backend.get();
  load.gpu_uring = gu.get();

  counters_.per_layer_wait_ns = std::make_unique<std::atomic<uint64_t>[]>(shape.layers);
  for (uint32_t l = 0; l < shape.layers; ++l) counters_.per_layer_wait_ns[l] = 0;
  load_path_ = make_layer_path(plan.load, load);
  store_path_ = make_layer_path(plan.store, store);
  pool_ = std::move(pool);
  index_ = std::move(index);
  events_ = std::move(events);
  staging_ = std::move(staging);
  staging_pin_ = std::move(staging_pin);
  store_staging_ = std::move(store_staging);
  store_staging_pin_ = std::move(store_staging_pin);
  dram_ = std::move(dram_pool);
  backend_ = std::move(backend);
  load_arena_ = std::move(load_arena);
  load_staging_ = std::move(load_staging);
  load_backend_ = std::move(load_backend);
  gpu_uring_ = std::move(gu);
  tier_ = std::move(tier);
  backend_name_ = tutti::backend_name(b);
  if (log_enabled(TUTTI_LOG_INFO))
    log(TUTTI_LOG_INFO, std::string("backend ") + tutti::backend_name(b) + (plan.why.empty() ? "" : " (" + plan.why + ")") +
                            ", loads " + load_path_->name() + ", stores " + store_path_->name() + ", direct I/O " +
                            (plan.direct ? "on" : "off"));
  if (torn_records_)
    log(TUTTI_LOG_WARN, std::to_string(torn_records_) + " commit record(s) of the pool are torn or damaged: their "
                                                         "chunks were dropped (an interrupted store, or a damaged "
                                                         "device; tutti fsck tells more)");
  device_ = std::move(device);
  remote_ = std::move(remote_tier);
  scheduler_ = std::make_unique<Scheduler>(cfg_.lookahead, cfg_.store_slack, static_cast<int>(cfg_.store_nice), reads_first_);
  binding_ = std::move(binding);
  registered_.store(true, std::memory_order_release);  // lookup service threads may look now
  lookup_server_ = std::move(lookup_server);
}

std::vector<Key> Runtime::tail_keys(const Key& parent, const int32_t* tokens, size_t n) const {
  const size_t g = cfg_.partial_granule();
  if (!g || n == 0) return {};
  return partial_keys(parent, tokens, std::min<size_t>(n, cfg_.chunk_tokens - 1), g);
}

size_t Runtime::lookup(const int32_t* tokens, size_t n, const void* salt, size_t salt_len) {
  require_registered();
  TUTTI_EXPECT(tokens != nullptr || n == 0, "tokens is NULL");
  TUTTI_EXPECT(salt != nullptr || salt_len == 0, "salt is NULL but salt_len is not 0");
  const Key root = this->root(salt, salt_len);
  auto keys = chunk_keys(root, tokens, n, cfg_.chunk_tokens);
  size_t tail = 0;
  const size_t ct = cfg_.chunk_tokens;
  size_t hit = index_->match_prefix(
      keys, [&](size_t whole) { return tail_keys(whole ? keys[whole - 1] : root, tokens + whole * ct, n - whole * ct); },
      &tail);
  if (size_t more = look_further(keys, hit)) hit += more, tail = 0;  // a whole chunk is longer than a partial one
  return count_lookup(hit, tail, n);
}

size_t Runtime::look_further(std::span<const Key> keys, size_t local) {
  if (!remote_) return 0;
  if (local) remote_->offer(keys.first(local), local * cfg_.chunk_tokens);  // sightings, for admission
  return local < keys.size() ? remote_->present(keys.subspan(local)) : 0;
}

size_t Runtime::count_lookup(size_t whole, size_t tail, size_t n) {
  const size_t ct = cfg_.chunk_tokens, g = cfg_.partial_granule(), hit = whole * ct + tail * g;
  counters_.lookups++;
  counters_.hit_chunks += whole + (tail > 0);
  // A miss: the prompt goes on past the hit far enough for a longer partial chunk, or a whole one.
  const size_t next = g ? std::min((tail + 1) * g, ct) : ct;
  if (n - whole * ct >= next) counters_.miss_chunks++;
  return hit;
}

uint64_t Runtime::lookup_lease(const int32_t* tokens, size_t n, const void* salt, size_t salt_len, uint32_t ttl_ms,
                               size_t* hit) {
  require_registered();
  TUTTI_EXPECT(tokens != nullptr || n == 0, "tokens is NULL");
  TUTTI_EXPECT(salt != nullptr || salt_len == 0, "salt is NULL but salt_len is not 0");
  expire_leases();
  Lease lease;
  const Key root = this->root(salt, salt_len);
  const auto keys = chunk_keys(root, tokens, n, cfg_.chunk_tokens);
  for (const Key& key : keys) {
    auto slot = index_->pin(key);  // the prefix up to the first miss, as lookup counts it
    if (!slot) break;
    lease.slots.push_back(*slot);
  }
  size_t whole = lease.slots.size();
  // Chunks of the remote tier are not pinned: the cluster may evict them before the load, which
  // then misses them as it misses any chunk the cluster lost.
  const size_t remote = look_further(keys, whole);
  size_t tail = 0;
  const auto tails = remote ? std::vector<Key>{}
                            : tail_keys(whole ? keys[whole - 1] : root, tokens + whole * cfg_.chunk_tokens,
                                        n - whole * cfg_.chunk_tokens);
  whole += remote;
  for (size_t i = tails.size(); i-- > 0 && !tail;)  // the longest partial chunk that follows
    if (auto slot = index_->pin(tails[i])) {
      lease.slots.push_back(*slot);
      tail = i + 1;
    }
  lease.deadline = ttl_ms ? std::chrono::steady_clock::now() + std::chrono::milliseconds(ttl_ms)
                          : std::chrono::steady_clock::time_point::max();
  *hit = count_lookup(whole, tail, n);
  std::lock_guard lock(leases_mu_);
  const uint64_t id = ++next_lease_;
  try {
    leases_.emplace(id, std::move(lease));
  } catch (...) {
    for (uint64_t slot : lease.slots) index_->unpin(slot);
    throw;
  }
  return id;
}

void Runtime::release_lease(uint64_t id) {
  std::lock_guard lock(leases_mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  for (uint64_t slot : it->second.slots) index_->unpin(slot);
  leases_.erase(it);
}

void Runtime::expire_leases() {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(leases_mu_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    for (uint64_t slot : it->second.slots) index_->unpin(slot);
    it = leases_.erase(it);
  }
}

tutti_stats Runtime::stats() const {
  tutti_stats s{};
  s.struct_size = sizeof s;
  s.num_layers = binding_ ? binding_->shape().layers : 0;
  s.bytes_read = counters_.io.bytes_read;
  s.bytes_written = counters_.io.bytes_written;
  s.ios = counters_.io.ios;
  s.lookups = counters_.lookups;
  s.hit_chunks = counters_.hit_chunks;
  s.miss_chunks = counters_.miss_chunks;
  s.stored_chunks = counters_.stored_chunks;
  s.failed_chunks = counters_.failed_chunks;
  s.layer_waits = counters_.layer_waits;
  s.layer_wait_ns = counters_.layer_wait_ns;
  s.load_timeouts = counters_.load_timeouts;
  if (tier_) {
    s.tier_hits = tier_->hits();
    s.tier_misses = tier_->misses();
  }
  if (remote_) {
    const auto r = remote_->stats();
    s.remote_hit_chunks = r.hit_chunks;
    s.remote_loaded_chunks = r.loaded_chunks;
    s.remote_written_chunks = r.written_chunks;
    s.remote_promoted_chunks = r.promoted_chunks;
    s.remote_rejected = r.rejected;
    s.remote_errors = r.errors;
  }
  if (index_) {
    s.evictions = index_->evictions();
    s.slots_total = index_->slots();
    s.slots_used = index_->used();
  }
  return s;
}

std::vector<uint64_t> Runtime::layer_wait_ns() const {
  std::vector<uint64_t> out;
  if (!binding_) return out;
  for (uint32_t l = 0; l < binding_->shape().layers; ++l) out.push_back(counters_.per_layer_wait_ns[l]);
  return out;
}

void Runtime::histogram(int kind, tutti_histogram* out) const {
  switch (kind) {
    case TUTTI_HISTOGRAM_LAYER_WAIT: return counters_.layer_wait.read(out);
    case TUTTI_HISTOGRAM_LOAD: return counters_.load.read(out);
    case TUTTI_HISTOGRAM_STORE: return counters_.store.read(out);
  }
  fail(TUTTI_EINVAL, "histogram kind " + std::to_string(kind) + " is not a tutti_histogram_kind");
}

}  // namespace tutti
