// A batch of load or store requests, executed layer by layer (see scheduler.hpp).
// Built by add(), planned by submit() (keys pinned or slots claimed), then its layers are
// issued by the scheduler and completed by I/O threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "datapath/backend.hpp"
#include "binding/staging.hpp"
#include "index/key.hpp"
#include "kernels/device.hpp"
#include "kernels/gpu_uring.hpp"
#include "tutti.h"

namespace tutti {

class Runtime;
class Batch;

// One I/O of a batch: object bytes [lo, hi) of one chunk's layer.
class LayerOp final : public IoOp {
 public:
  void prepare() override;
  void complete(int64_t res) override;

  Batch* batch = nullptr;
  uint32_t item = 0;
  uint32_t layer = 0;
  uint64_t lo = 0, hi = 0;
  Staging::Buffer stage;  // data == nullptr: straight to the blocks
  std::vector<iovec> iovs;
};

class Batch {
 public:
  Batch(std::shared_ptr<Runtime> rt, tutti_op op);
  ~Batch();  // waits for in-flight work

  void add(const tutti_request* reqs, size_t n);
  void submit();
  void wait_layer(uint32_t layer);
  void wait_layer_async(uint32_t layer, void* stream);
  int wait();
  std::string first_error() const;  // "" if none was noted
  tutti_result result(size_t request);
  size_t chunk_status(size_t request, int* out, size_t cap);
  bool is_load() const { return op_ == TUTTI_OP_LOAD; }

  // For the scheduler.
  uint32_t layers() const { return layers_; }
  uint32_t next_issue = 0;              // guarded by the scheduler's mutex
  uint32_t done_prefix() const { return done_prefix_.load(std::memory_order_acquire); }
  void issue_layer(uint32_t layer);     // builds and submits one layer's ops
  void commit();                        // store: sync, write commit records, publish

 private:
  friend class LayerOp;
  struct Request {
    tutti_request r;
    size_t first_chunk = 0;            // token_begin / chunk_tokens
    std::vector<Key> keys;             // of the chunks in range
    std::vector<Key> prefix;           // of the chunks before it (a store pins those present)
    std::vector<int> status;           // per chunk in range
  };
  // A chunk that needs I/O.
  struct Item {
    uint32_t req = 0;
    uint32_t chunk = 0;  // index into Request::keys
    uint64_t slot = 0;
    const int32_t* blocks = nullptr;   // block ids of the chunk
    uint32_t first_block = 0;          // where its ids start in the pinned block-id array
    std::atomic<int> error{0};
    bool dirty = false;                // store: a record of the slot may be on disk
    std::vector<uint64_t> sums;        // store: per-layer checksums
  };

  void plan();  // submit's work, once the runtime counts the batch
  void op_done(LayerOp& op, int64_t res);
  // Every op of `layer` is over: in CUDA memory the layer still has to be scattered.
  void layer_io_done(uint32_t layer);
  void layer_done(uint32_t layer);
  void scatter_on_device(uint32_t layer);
  // gpu-uring: the GPU reads and scatters the whole layer; the CPU launches it.
  void plan_gpu_loads();
  void issue_layer_gpu(uint32_t layer);
  void gpu_layer_landed(uint32_t layer);
  void issue_layer_dram(uint32_t layer);
  void dram_layer_landed(uint32_t layer);
  void staged_layer_landed(uint32_t layer);
  void land(uint32_t layer, const int32_t* status, bool errnos);
  // Load checks (verify): see LayerOp::complete, check_layer and the CUDA paths' check_terms.
  void check_layer(uint32_t layer);
  void check_terms(uint32_t item, uint32_t layer, uint64_t terms);
  void landed_corrupt(Item& it, uint32_t layer);
  void check_landed(uint32_t layer, const int32_t* status);
  uint64_t layer_terms_dev(uint32_t layer) const;  // 0 without checks
  static void fail_item(Item& it, int code);  // the first error of a chunk stays
  // The batch's first failure in words: which request, chunk and layer, the file, offset
  // and errno, or the checksum that did not match.
  void note_error(const Item& it, uint32_t layer, const std::string& what);
  std::string first_error_;  // guarded by mu_
  void forget_cached(const Item& it, uint32_t layer);  // bytes that failed their checksum
  void fail_all(int code);
  // CUDA host callbacks: on_landed<F> calls F(layer) for the Landed it was given.
  struct Landed;
  template <void (Batch::*F)(uint32_t)>
  static void on_landed(void* arg);
  void gather_on_device(std::vector<IoOp*>& group, size_t first);
  // Every path that may end the batch ends with release(): the batch is final (and may be
  // freed by its owner) only once no thread is inside any of its callbacks.
  void release(uint64_t n = 1);
  void finish();                       // everything moved; results final

  std::shared_ptr<Runtime> rt_;
  tutti_op op_;
  uint32_t layers_ = 0;
  enum class State { kBuilding, kRunning, kDone };
  std::atomic<State> state_{State::kBuilding};
  std::vector<Request> reqs_;
  std::deque<Item> items_;
  // store: chunks another batch was writing at submit; settled (committed or failed) by the
  // owner's wait, never on the scheduler thread that commits the other batch.
  struct Awaited {
    uint32_t req, chunk;
    uint64_t slot, ticket;
  };
  std::vector<Awaited> awaited_;
  std::vector<uint64_t> held_;         // store: slots pinned until finish (present, prefix)
  void tombstone_reused();
  void settle();
  bool settled_ = false;
  std::vector<std::vector<LayerOp>> ops_;  // per layer, filled when it is issued
  // CUDA memory: pinned memory the copy kernels read: the items' block ids, then one
  // descriptor per item and layer (layer L's at [L * copies_stride_]).
  void* pinned_ = nullptr;
  uint64_t pinned_dev_ = 0;
  uint64_t ids_dev_ = 0;
  gpu::ChunkCopy* copies_ = nullptr;
  uint64_t copies_dev_ = 0;
  size_t copies_stride_ = 0;
  int32_t* status_ = nullptr;  // dram: per layer and item, 0 or why the chunk is not copied
  uint64_t status_dev_ = 0;
  uint64_t epoch_ = 0;                     // CUDA memory: this load batch's number
  // CUDA memory with verify: per layer and chunk, the checksum kernel's page terms (pinned),
  // and per layer which items the staged scatter (or check_layer) gave them to, in order.
  uint64_t* terms_ = nullptr;
  uint64_t terms_dev_ = 0;
  std::vector<std::vector<uint32_t>> scattered_;
  bool verify_ = false;        // a load that checks checksums
  bool check_layers_ = false;  // ... per whole layer in layer_done
  // gpu-uring: pinned descriptors (the items' extents, then per staging set its read targets,
  // scatter descriptors and statuses) and the staging of every set. Layer L uses set
  // L % gpu_sets_ and the driver's stream of the same number, so a set is reused only after
  // the stream has finished the layer before.
  struct GpuSet {
    uint64_t targets = 0, copies = 0, status = 0;  // device addresses
    gpu::IoTarget* targets_host = nullptr;        // the same memory, as the CPU sees it
    gpu::ChunkCopy* copies_host = nullptr;
    const int32_t* status_host = nullptr;
  };
  void* gpu_pinned_ = nullptr;
  uint64_t gpu_chunks_ = 0;
  std::vector<GpuSet> gpu_sets_;
  std::vector<Staging::Buffer> gpu_staging_;
  bool direct_ = false;
  bool per_block_ = false;  // io_mode=per-block-baseline
  std::byte* block_address(const LayerOp& op) const;  // per-block: where op's block lies
  uint64_t device_extent_checksum(uint32_t layer, const int32_t* blocks) const;
  std::unique_ptr<std::atomic<uint32_t>[]> pending_;  // ops outstanding per layer
  std::atomic<uint64_t> outstanding_{0};               // unissued layers + ops in flight
  std::vector<uint8_t> layer_done_;    // guarded by mu_
  std::atomic<uint32_t> done_prefix_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace tutti
