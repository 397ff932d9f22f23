// SPDX-License-Identifier: Apache-2.0
// A batch of load or store requests, executed layer by layer (see scheduler/scheduler.hpp).
// Built by add(), planned by submit() (keys pinned or slots claimed, the path's run planned),
// then its layers are issued by the scheduler and land on I/O threads or CUDA callbacks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "datapath/layer_path.hpp"
#include "remote/tier.hpp"
#include "resolver/key.hpp"
#include "scheduler/scheduler.hpp"
#include "tutti.h"

namespace tutti {

class Runtime;

// The batch orders layers, tracks what landed and reports results; how a layer's bytes move
// is its LayerPath's business (datapath/layer_path.hpp), or, for the chunks of a load that the
// pool lacks and the remote tier holds, the tier's (remote/tier.hpp). A layer is done when
// both have landed it.
class Batch final : public Scheduled, private PathSink, private remote::LoadSink {
 public:
  Batch(std::shared_ptr<Runtime> rt, tutti_op op);
  ~Batch() override;  // waits for in-flight work

  void add(const tutti_request* reqs, size_t n);
  void submit();
  void wait_layer(uint32_t layer);
  void wait_layer_async(uint32_t layer, void* stream);
  void layer_ready(uint32_t layer, void* stream);  // TUTTI_OP_STORE_BY_LAYER
  void poll(uint32_t* layers_done, int* done) const;
  // A store by layer still waiting for layers: its chunks fail and it finishes without writing
  // (destroyed early, or its runtime closed). Anything else: nothing.
  void cancel();
  int wait();
  std::string first_error() const;  // "" if none was noted
  tutti_result result(size_t request);
  size_t chunk_status(size_t request, int* out, size_t cap);
  bool is_load() const override { return op_ == TUTTI_OP_LOAD; }
  bool by_layer() const { return op_ == TUTTI_OP_STORE_BY_LAYER; }

  // Scheduled
  uint32_t layers() const override { return layers_; }
  uint32_t done_prefix() const override { return done_prefix_.load(std::memory_order_acquire); }
  uint32_t ready_prefix() const override { return ready_prefix_.load(std::memory_order_acquire); }
  bool cancelled() const override { return cancelled_.load(std::memory_order_acquire); }
  uint32_t layers_ahead() const override;
  void issue_layer(uint32_t layer) override;  // hands one layer to the path
  void commit() override;                     // store: sync, write commit records, publish

 private:
  void count_wait(uint32_t layer, std::chrono::steady_clock::time_point since);  // the stats' layer waits
  void note_reached(uint32_t layer, void* stream) noexcept;  // reached_[layer], once
  struct Request {
    tutti_request r;
    size_t first_chunk = 0;            // token_begin / chunk_tokens
    size_t end = 0;                    // of the tokens it moves (a store's: its last chunk's)
    Key root;                          // of its chunk keys (namespace and salt)
    std::optional<Key> tail_whole;     // store ending in a partial chunk: the whole chunk's key there
    std::vector<Key> keys;             // of the chunks in range
    std::vector<Key> prefix;           // of the chunks before it (a store pins those present)
    std::vector<int> status;           // per chunk in range
    std::vector<int32_t> tokens;       // a store's, with KV events: its chunks' tokens, from its first
  };
  // Whose chunk each PathChunk is.
  struct Owner {
    uint32_t req = 0;
    uint32_t chunk = 0;  // index into Request::keys
    bool dirty = false;  // store: a record of the slot may be on disk
  };

  void plan();    // submit's work, once the runtime counts the batch
  void unplan();  // a plan that failed: pins and claims given back
  void tombstone_reused();
  // PathSink
  void chunk_failed(uint32_t i, uint32_t layer, int code, const std::string& why) override;
  void layer_landed(uint32_t layer) override;
  void layer_queued(uint32_t layer) override;
  // Both sinks': a load under load_timeout_ms moves its bytes into the blocks through fence_.
  Fence* fence() override { return timeout_.count() ? &fence_ : nullptr; }
  // remote::LoadSink
  void remote_failed(uint32_t i, uint32_t layer, const std::string& why) override;
  void remote_landed(uint32_t layer) override { part_landed(layer); }
  void part_landed(uint32_t layer);  // the path or the tier landed `layer`
  // Who lands each layer: the path, the remote tier, or both (the chunks are fixed once planned).
  uint32_t parts() const { return !chunks_.empty() + !remote_chunks_.empty(); }
  void note_error(const Owner& o, uint32_t layer, const std::string& why);
  // A load's wait for `layer` ran past load_timeout_ms: every chunk fails, and once the fence is
  // closed no byte of the batch reaches the blocks. Its I/O still ends (wait, poll).
  void give_up(uint32_t layer);
  bool gave_up_running() const;  // given up, its reads not all over yet
  // Waits for `layer` to land, at most load_timeout_ms; false when the load gives up (then or
  // before).
  bool landed_in_time(uint32_t layer);
  [[noreturn]] void fail_given_up(uint32_t layer) const;  // TUTTI_EIO: the load gave up by `layer`
  void fail(uint32_t i, int code);  // the first error of a chunk stays
  void fail_all(int code);
  void finish();                    // everything moved; results final
  void settle();

  std::shared_ptr<Runtime> rt_;
  tutti_op op_;
  uint32_t layers_ = 0;
  enum class State { kBuilding, kRunning, kDone };
  std::atomic<State> state_{State::kBuilding};
  std::vector<Request> reqs_;
  std::deque<PathChunk> chunks_;     // the chunks that need I/O
  std::vector<Owner> owners_;        // one per chunk
  std::deque<remote::RemoteChunk> remote_chunks_;  // load: chunks the remote tier serves
  std::vector<Owner> remote_owners_;               // one per remote chunk
  std::unique_ptr<PathRun> run_;
  // store: chunks another batch was writing at submit; settled (committed or failed) by the
  // owner's wait, never on the scheduler thread that commits the other batch.
  struct Awaited {
    uint32_t req, chunk;
    uint64_t slot, ticket;
  };
  std::vector<Awaited> awaited_;
  std::vector<uint64_t> held_;       // store: slots pinned until finish (present, prefix)
  bool settled_ = false;
  std::chrono::steady_clock::time_point submitted_;  // the load and store histograms' start
  uint64_t epoch_ = 0;               // CUDA memory: this load batch's number
  std::atomic<uint32_t> unlanded_{0};
  std::vector<uint8_t> layer_parts_;  // parts that landed each layer; guarded by mu_
  std::vector<uint8_t> layer_done_;  // guarded by mu_
  std::atomic<uint32_t> done_prefix_{0};
  // Store by layer: the layers the engine declared ready (guarded by mu_), how many are ready
  // in order from the first, and in CUDA memory the event each was declared at.
  std::vector<uint8_t> layer_ready_;
  std::atomic<uint32_t> ready_prefix_{0};
  std::atomic<bool> cancelled_{false};  // destroyed before every layer was ready: writes nothing
  std::vector<void*> ready_events_;
  // A load: where its engine is, for the scheduler's slack (layers_ahead). host_next_: one past
  // the layer a thread last waited for in tutti_batch_wait_layer; in CUDA memory, per layer an
  // event recorded on the engine's stream behind its wait for the layer (only with option
  // store_slack), and one past the last of them that fired: where the GPU is (kept by the
  // scheduler thread alone).
  std::atomic<bool> consumer_seen_{false};
  std::atomic<uint32_t> host_next_{0};
  std::unique_ptr<std::atomic<void*>[]> reached_;
  mutable std::atomic<uint32_t> gpu_next_{0};
  // The batch's first failure in words: which request, chunk and layer, the file, offset
  // and errno, or the checksum that did not match.
  std::string first_error_;          // guarded by mu_
  std::chrono::milliseconds timeout_{0};  // option load_timeout_ms; loads only
  Fence fence_;
  bool given_up_ = false;  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace tutti
