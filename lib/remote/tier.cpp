// SPDX-License-Identifier: Apache-2.0
#include "remote/tier.hpp"

#include "common/error.hpp"

#if TUTTI_HAVE_REMOTE

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "binding/kv_binding.hpp"
#include "common/fd.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "datapath/dram_tier.hpp"
#include "index/index.hpp"
#include "kernels/device.hpp"
#include "pool/pool.hpp"
#include "remote/redis_cluster.hpp"
#include "remote/value.hpp"

namespace tutti::remote {

namespace {

constexpr auto kRetryAfter = std::chrono::seconds(1);  // how long an unreachable cluster is left alone
constexpr size_t kMaxSightings = size_t{1} << 20;     // chunk keys the admission remembers
constexpr size_t kLayersPerCall = 8;                   // load layers pipelined in one call
constexpr uint8_t kWritten = UINT8_MAX;                // a sighting count: written through already
constexpr auto kCloseBudget = std::chrono::seconds(5);  // for the write-throughs still queued at close
constexpr size_t kMaxQueued = size_t{1} << 16;          // background jobs waiting; beyond, the oldest go
constexpr uint8_t kWriteAttempts = 3;                   // a write-through the cluster refused goes again

// The commands of one call, each on a key of its own, which lives as long as the command that
// names it (a Command holds views).
class Calls {
 public:
  explicit Calls(size_t n) {
    keys_.reserve(n);  // no reallocation: the commands' views stay valid
    cmds_.reserve(n);
  }
  void add(std::string_view op, std::string key, std::string_view value = {}) {
    const std::string& k = keys_.emplace_back(std::move(key));
    cmds_.push_back(value.data() ? Command{{op, k, value}, k} : Command{{op, k}, k});
  }
  bool empty() const { return cmds_.empty(); }
  std::vector<Reply> run(Cluster& c) const { return c.run(cmds_); }

 private:
  std::vector<std::string> keys_;
  std::vector<Command> cmds_;
};

class RedisTier final : public Tier {
 public:
  RedisTier(const TierOptions& opts, const TierParts& parts);
  ~RedisTier() override;

  size_t present(std::span<const Key> keys) override;
  void load_layer(std::deque<RemoteChunk>& chunks, LoadSink& sink, uint32_t layer) override;
  void offer(std::span<const Key> keys, uint64_t prefix_tokens) override;
  void loaded(std::vector<Key> keys) override;
  TierStats stats() const override;

 private:
  using Clock = std::chrono::steady_clock;
  struct LoadJob {
    std::deque<RemoteChunk>* chunks;
    LoadSink* sink;
    uint32_t layer;
  };
  struct Job {
    Key key;
    bool promote;  // else a write-through
    uint8_t attempts = 0;
  };

  ValueId id(const Key& k, uint32_t layer) const { return ValueId{k, shape_, layer}; }
  // The cluster is left alone while it was unreachable less than kRetryAfter ago.
  bool resting() const { return Clock::now().time_since_epoch().count() < rest_until_.load(); }
  Clock::time_point rest_end() const { return Clock::time_point(Clock::duration(rest_until_.load())); }
  void unreachable(const std::string& why);
  void reachable();
  // A client for this thread's use: `c` as it is, or a new one; null while resting or when
  // no node answers.
  bool ready(std::unique_ptr<Cluster>& c);
  // After a call: errors counted, and a call that every node left unanswered rests the tier.
  void judge(const std::vector<Reply>& replies);

  void load_loop();  // a loader thread, with a connection of its own
  void serve(std::unique_ptr<Cluster>& loader, const std::vector<LoadJob>& jobs);
  void background_loop();
  void queue(Job job);  // under mu_
  // True when settled: written, or nothing to write (evicted, or unsound in the pool); false
  // when the cluster did not take every layer.
  bool write_through(const Key& key);
  void promote_one(const Key& key);

  const TierOptions opts_;
  const TierParts parts_;
  const std::vector<Endpoint> seeds_;
  const uint64_t shape_;
  const uint32_t layers_;
  const uint64_t layer_bytes_;
  std::atomic<int64_t> rest_until_{0};
  std::atomic<bool> warned_{false};  // the current outage was reported

  std::mutex clients_mu_;
  std::vector<std::unique_ptr<Cluster>> idle_;  // lookups' clients, one per concurrent lookup

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Clock::time_point stop_deadline_;  // once stopping: the write-throughs still queued go then
  std::deque<LoadJob> loads_;
  std::deque<Job> jobs_;
  std::unordered_map<Key, uint8_t, KeyHash> sightings_;
  std::unique_ptr<Cluster> writer_;  // the background thread's
  AlignedBuffer chunk_buf_;                    // the background thread's: a chunk on its way

  std::atomic<uint64_t> hits_{0}, loaded_{0}, written_{0}, promoted_{0}, rejected_{0}, errors_{0};
  std::vector<std::thread> load_threads_;  // last: they use everything above
  std::thread background_thread_;
};

RedisTier::RedisTier(const TierOptions& opts, const TierParts& parts)
    : opts_(opts),
      parts_(parts),
      seeds_(parse_seeds(opts.uri)),
      shape_(shape_fingerprint(parts.kv->shape())),
      layers_(parts.kv->shape().layers),
      layer_bytes_(parts.kv->shape().layer_bytes()) {
  std::unique_ptr<Cluster> first;
  if (ready(first)) idle_.push_back(std::move(first));  // else warned: the tier rests a while
  for (unsigned i = 0; i < opts_.connections; ++i)
    load_threads_.emplace_back([this] {
      name_this_thread("tutti-rload");
      load_loop();
    });
  background_thread_ = std::thread([this] {
    name_this_thread("tutti-rwrite");
    background_loop();
  });
}

RedisTier::~RedisTier() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    stop_deadline_ = Clock::now() + std::max<Clock::duration>(kCloseBudget, 10 * opts_.timeout);
  }
  cv_.notify_all();
  for (auto& t : load_threads_) t.join();
  background_thread_.join();
}

void RedisTier::unreachable(const std::string& why) {
  errors_++;
  rest_until_ = (Clock::now() + kRetryAfter).time_since_epoch().count();
  if (!warned_.exchange(true))
    log(TUTTI_LOG_WARN, "remote tier: the cluster at " + opts_.uri + " does not answer (" + why +
                            "): lookups and loads use the local pool alone, write-throughs wait; trying again every second");
}

void RedisTier::reachable() {
  if (warned_.exchange(false)) log(TUTTI_LOG_WARN, "remote tier: the cluster at " + opts_.uri + " answers again");
}

bool RedisTier::ready(std::unique_ptr<Cluster>& c) {
  if (resting()) return false;
  if (c) return true;
  try {
    c = std::make_unique<Cluster>(seeds_, opts_.timeout);
    return true;
  } catch (const Error& e) {
    unreachable(e.what());
    return false;
  }
}

void RedisTier::judge(const std::vector<Reply>& replies) {
  size_t failed = 0;
  const Reply* first = nullptr;
  for (const Reply& r : replies)
    if (!r.ok()) failed++, first = first ? first : &r;
  if (!failed) return reachable();
  if (failed == replies.size()) return unreachable(std::string(first->str()));
  errors_ += failed;  // some nodes answer: the failover of the others may be under way
}

size_t RedisTier::present(std::span<const Key> keys) {
  if (keys.empty() || resting()) return 0;
  std::unique_ptr<Cluster> c;
  {
    std::lock_guard lock(clients_mu_);
    if (!idle_.empty()) c = std::move(idle_.back()), idle_.pop_back();
  }
  if (!ready(c)) return 0;
  Calls calls(keys.size());
  for (const Key& k : keys) calls.add("EXISTS", value_key(id(k, layers_ - 1)));
  const auto replies = calls.run(*c);
  judge(replies);
  size_t n = 0;
  while (n < replies.size() && replies[n].type() == Reply::Type::kInteger && replies[n].integer() == 1) ++n;
  hits_ += n;
  std::lock_guard lock(clients_mu_);
  idle_.push_back(std::move(c));
  return n;
}

void RedisTier::load_layer(std::deque<RemoteChunk>& chunks, LoadSink& sink, uint32_t layer) {
  {
    std::lock_guard lock(mu_);
    loads_.push_back(LoadJob{&chunks, &sink, layer});
  }
  cv_.notify_all();
}

void RedisTier::load_loop() {
  std::unique_ptr<Cluster> loader;
  for (;;) {
    std::vector<LoadJob> jobs;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !loads_.empty(); });
      if (loads_.empty()) return;  // stopping, and no batch waits for a layer
      // A share of what is queued, so the other loaders' connections take the rest.
      const size_t take = std::clamp<size_t>(loads_.size() / opts_.connections, 1, kLayersPerCall);
      while (!loads_.empty() && jobs.size() < take) jobs.push_back(loads_.front()), loads_.pop_front();
    }
    serve(loader, jobs);
    cv_.notify_all();  // the background thread waits while loads are queued
  }
}

// One call for the layers queued together: every GET pipelined, then each layer checked,
// scattered and reported in order.
void RedisTier::serve(std::unique_ptr<Cluster>& loader, const std::vector<LoadJob>& jobs) {
  struct Get {
    size_t job;
    uint32_t chunk;
  };
  std::vector<Get> gets;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (uint32_t i = 0; i < jobs[j].chunks->size(); ++i)
      if (!(*jobs[j].chunks)[i].error.load()) gets.push_back(Get{j, i});
  Calls calls(gets.size());
  for (const Get& g : gets) calls.add("GET", value_key(id((*jobs[g.job].chunks)[g.chunk].key, jobs[g.job].layer)));
  std::vector<Reply> replies;
  if (!calls.empty() && ready(loader)) {
    replies = calls.run(*loader);
    judge(replies);
  }
  const KvBinding& kv = *parts_.kv;
  uint64_t refused = 0;
  std::string first_refusal;
  size_t g = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LoadJob& job = jobs[j];
    for (; g < gets.size() && gets[g].job == j; ++g) {
      RemoteChunk& c = (*job.chunks)[gets[g].chunk];
      if (c.error.load()) continue;  // an earlier layer of this call failed it
      std::string why;
      if (replies.empty()) {
        why = "the remote tier is unreachable";
      } else if (const Reply& r = replies[g]; r.type() == Reply::Type::kNil) {
        why = "not in the remote tier (evicted, or its write was lost)";
      } else if (!r.ok() || r.type() != Reply::Type::kString) {
        why = "the remote tier: " + std::string(r.str());
      } else if (auto s = check_value(r.str(), id(c.key, job.layer), layer_bytes_); s != ValueStatus::kOk) {
        why = std::string("a remote value was refused: ") + describe(s);
        rejected_++;  // before the layer lands: the batch's owner may read the stats then
        if (!refused++) first_refusal = why;
      } else {
        const auto* payload = reinterpret_cast<const std::byte*>(r.str().data() + kValueHeaderBytes);
        const Fence::Pass pass(job.sink->fence());
        if (!pass.open()) continue;  // the load was given up on: it already failed
        try {
          if (kv.on_device())  // one copy per run, on this thread's own stream: not yet fast
            kv.for_each_run(job.layer, c.blocks, c.span, 0, layer_bytes_, [&](const MemRun& m) {
              parts_.device->copy_sync(m.addr, payload + m.obj_off, m.len);
            });
          else
            kv.scatter(job.layer, c.blocks, c.span, 0, layer_bytes_, payload);
          continue;
        } catch (const Error& e) {
          why = std::string("copying a remote value into the KV cache: ") + e.what();
        }
      }
      int expected = 0;
      c.error.compare_exchange_strong(expected, TUTTI_ENOENT);
      job.sink->remote_failed(gets[g].chunk, job.layer, why);
    }
    job.sink->remote_landed(job.layer);  // the last touch of the job's batch
  }
  if (refused)
    log(TUTTI_LOG_WARN, "remote tier: " + std::to_string(refused) + " value(s) refused, loaded as misses (" +
                            first_refusal + ")");
}

void RedisTier::offer(std::span<const Key> keys, uint64_t prefix_tokens) {
  if (prefix_tokens < opts_.min_tokens || keys.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    if (sightings_.size() + keys.size() > kMaxSightings) sightings_.clear();  // forget, rather than grow
    for (const Key& k : keys) {
      uint8_t& seen = sightings_[k];
      if (seen == kWritten) continue;
      // A store is a sighting; a lookup that finds a chunk stored earlier is the next one.
      if (++seen < opts_.admit_sightings) continue;
      seen = kWritten;
      queue(Job{k, false});
    }
  }
  cv_.notify_all();
}

void RedisTier::queue(Job job) {
  jobs_.push_back(job);
  if (jobs_.size() <= kMaxQueued) return;
  // A long outage: the oldest job goes, and a write-through's sighting is forgotten with it,
  // so the chunk is offered again when next seen.
  if (!jobs_.front().promote) sightings_.erase(jobs_.front().key);
  jobs_.pop_front();
}

void RedisTier::loaded(std::vector<Key> keys) {
  loaded_ += keys.size();
  if (!opts_.promote || keys.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    for (const Key& k : keys) {
      sightings_[k] = kWritten;  // the cluster has it: lookups of the promoted copy write nothing
      queue(Job{k, true});
    }
  }
  cv_.notify_all();
}

void RedisTier::background_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      // Loads first: nothing is written while a batch waits for remote layers. While the
      // cluster rests the jobs wait for it: a chunk stored during a failover still goes.
      for (;;) {
        cv_.wait(lock, [&] { return stop_ || (!jobs_.empty() && loads_.empty()); });
        if (stop_ || !resting()) break;
        cv_.wait_until(lock, rest_end(), [&] { return stop_; });
      }
      if (stop_ && jobs_.empty()) return;
      if (stop_ && (Clock::now() > stop_deadline_ || resting())) {
        log(TUTTI_LOG_WARN, "remote tier: " + std::to_string(jobs_.size()) +
                                " chunk(s) not written through: the runtime closed before the cluster took them");
        return;
      }
      if (stop_ && jobs_.front().promote) {  // at close, write-throughs finish; promotions go
        jobs_.pop_front();
        continue;
      }
      if (!loads_.empty()) continue;
      job = jobs_.front();
      jobs_.pop_front();
    }
    try {
      if (job.promote) {
        promote_one(job.key);
      } else if (!write_through(job.key)) {
        // Refused, or only some layers taken (a failover under way): it goes again later; a
        // chunk the cluster holds in part is a miss meanwhile, never wrong bytes.
        std::lock_guard lock(mu_);
        if (++job.attempts < kWriteAttempts && !stop_) queue(job);
        else sightings_.erase(job.key);  // offered again when next seen
      }
    } catch (const Error& e) {
      errors_++;
      log(TUTTI_LOG_WARN, std::string("remote tier: ") + (job.promote ? "a promotion" : "a write-through") +
                              " failed: " + e.what());
    }
  }
}

// A committed chunk from the pool to the cluster: every layer read and checked against the
// commit record (rot in the pool is not spread), then SET in layer order on its node.
bool RedisTier::write_through(const Key& key) {
  if (!ready(writer_)) return false;
  Index& index = *parts_.index;
  const auto slot = index.pin(key);
  if (!slot) return true;  // evicted since
  // Each value is [64-byte header][payload]; payloads start 4 KiB-aligned, for O_DIRECT reads.
  const uint64_t stride = kIoAlign + layer_bytes_;
  if (chunk_buf_.size() < stride * layers_) chunk_buf_ = AlignedBuffer(stride * layers_);
  const AlignedBuffer& buf = chunk_buf_;
  std::vector<uint64_t> sums;
  bool sound = true;
  try {
    sums = index.layer_sums(*slot);
    for (uint32_t l = 0; l < layers_; ++l) {
      std::byte* payload = buf.data() + l * stride + kIoAlign;
      parts_.pool->read_layer(*slot, l, payload);
      sound = sound && payload_sum(payload, layer_bytes_) == sums[l];
    }
  } catch (...) {
    index.unpin(*slot);
    throw;
  }
  index.unpin(*slot);
  if (!sound) {
    log(TUTTI_LOG_WARN, "remote tier: a chunk read from the pool does not match its commit record: not written "
                        "through (tutti fsck checks the pool)");
    return true;
  }
  Calls calls(layers_);
  for (uint32_t l = 0; l < layers_; ++l) {
    auto* value = reinterpret_cast<uint8_t*>(buf.data() + l * stride + kIoAlign - kValueHeaderBytes);
    encode_value_header(id(key, l), layer_bytes_, sums[l], value);
    calls.add("SET", value_key(id(key, l)),
              std::string_view(reinterpret_cast<const char*>(value), kValueHeaderBytes + layer_bytes_));
  }
  const auto replies = calls.run(*writer_);
  judge(replies);
  if (!std::all_of(replies.begin(), replies.end(), [](const Reply& r) { return r.ok(); })) return false;
  written_++;
  return true;
}

// A chunk a load took from the cluster, into the local pool: read again, checked, written to
// a slot claimed as a store claims one, and committed as a store commits.
void RedisTier::promote_one(const Key& key) {
  Index& index = *parts_.index;
  if (auto slot = index.pin(key)) {  // stored here meanwhile
    index.unpin(*slot);
    return;
  }
  if (!ready(writer_)) return;
  Calls calls(layers_);
  for (uint32_t l = 0; l < layers_; ++l) calls.add("GET", value_key(id(key, l)));
  const auto replies = calls.run(*writer_);
  judge(replies);
  std::vector<uint64_t> sums(layers_);
  for (uint32_t l = 0; l < layers_; ++l) {
    const Reply& r = replies[l];
    if (r.type() != Reply::Type::kString) return;  // gone, or no answer: stays remote
    if (check_value(r.str(), id(key, l), layer_bytes_) != ValueStatus::kOk) {
      rejected_++;
      return;
    }
    sums[l] = value_payload_sum(r.str());
  }
  const auto a = index.allocate(key);
  if (a.claim == Index::Claim::kPresent) index.unpin(a.slot);
  if (a.claim != Index::Claim::kAllocated) return;  // present, being stored, or no room
  // The slot's extents are written here, not through the DRAM tier: what it still holds of
  // the slot's previous chunk must go before any load can find the promoted one there.
  if (parts_.dram_tier)
    for (uint32_t l = 0; l < layers_; ++l) {
      const Extent e = parts_.pool->geometry().layer_extent(a.slot, l);
      parts_.dram_tier->drop(e.file, e.offset, e.length);
    }
  bool dirty = a.reused;
  try {
    if (a.reused) parts_.pool->write_tombstones(std::span(&a.slot, 1));
    dirty = false;
    if (chunk_buf_.size() < layer_bytes_) chunk_buf_ = AlignedBuffer(layer_bytes_);
    for (uint32_t l = 0; l < layers_; ++l) {  // O_DIRECT writes need aligned memory
      std::memcpy(chunk_buf_.data(), replies[l].str().data() + kValueHeaderBytes, layer_bytes_);
      parts_.pool->write_layer(a.slot, l, chunk_buf_.data());
    }
    parts_.pool->sync();
    const Record record{a.slot, index.next_generation(), key, sums};
    dirty = true;  // from here a record of the slot may be durable
    parts_.pool->write_records(std::span(&record, 1));
    index.commit(a.slot, record.generation, std::move(sums));
  } catch (...) {
    index.abandon(a.slot, dirty);
    throw;
  }
  promoted_++;
}

TierStats RedisTier::stats() const {
  TierStats s;
  s.hit_chunks = hits_;
  s.loaded_chunks = loaded_;
  s.written_chunks = written_;
  s.promoted_chunks = promoted_;
  s.rejected = rejected_;
  s.errors = errors_;
  return s;
}

}  // namespace

std::unique_ptr<Tier> make_tier(const TierOptions& opts, const TierParts& parts) {
  return std::make_unique<RedisTier>(opts, parts);
}

}  // namespace tutti::remote

#else

namespace tutti::remote {

std::unique_ptr<Tier> make_tier(const TierOptions&, const TierParts&) {
  fail(TUTTI_EUNSUPPORTED, "option remote: this libtutti was built without hiredis (Debian: libhiredis-dev), so it has "
                           "no remote tier");
}

}  // namespace tutti::remote

#endif
