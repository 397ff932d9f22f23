// SPDX-License-Identifier: Apache-2.0
// The shared tier below the local pool (docs/remote.md): chunks live in a Redis Cluster as one
// value per chunk-layer (remote/value.hpp), so every runtime on any machine finds the prefixes
// any other stored.
// - Lookups go on in the cluster past the local pool's last hit: one pipelined EXISTS of each
//   chunk's last layer (a chunk's layers are written in order to one node, so its last layer
//   being there means the others were written before it).
// - Loads take the chunks the pool lacks from the cluster layer by layer, on the tier's loader
//   threads (a connection each), beside the local path's I/O: each value is checked (key,
//   shape, layer, checksum) before its bytes are scattered into the KV blocks; a value that
//   fails, or a node that does not answer by the deadline, makes its chunk a miss. Chunks loaded
//   whole are then copied into the local pool in the background (promotion).
// - Stores write through: chunks committed to the pool are admitted (all, or those seen twice,
//   and only prefixes of at least remote_min_tokens) and written by a background thread from
//   the pool, never while loads are queued.
// A cluster that cannot be reached makes the tier step aside: lookups and loads use the local
// pool alone (a warning says so), and the tier tries again a second later.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/fence.hpp"
#include "kernels/copy_layout.hpp"
#include "resolver/key.hpp"

namespace tutti {
class DramTier;
class Index;
class Pool;
class KvBinding;
namespace gpu {
class Device;
}
}  // namespace tutti

namespace tutti::remote {

struct TierOptions {
  std::string uri;                         // option remote: redis://host:port,...
  std::chrono::milliseconds timeout{200};  // remote_timeout_ms: the deadline of every call
  uint32_t admit_sightings = 1;            // remote_admit: all (1), twice (2)
  uint64_t min_tokens = 0;                 // remote_min_tokens: shorter prefixes stay local
  bool promote = true;                     // remote_promote
  unsigned connections = 1;                // remote_connections: loader threads, a connection each
};

// What the tier needs of the runtime; alive as long as the tier.
struct TierParts {
  Index* index = nullptr;
  const Pool* pool = nullptr;
  const KvBinding* kv = nullptr;
  gpu::Device* device = nullptr;  // the KV cache is in CUDA memory
  DramTier* dram_tier = nullptr;  // the DRAM tier, which must forget a slot a promotion rewrites
};

// A chunk a load batch takes from the cluster.
struct RemoteChunk {
  Key key;
  const int32_t* blocks = nullptr;  // its block ids, from the one with its first token
  gpu::ChunkSpan span;              // the tokens that move
  std::atomic<int> error{0};        // its first error; later layers skip it
};

// What the loader reports to the batch it serves.
class LoadSink {
 public:
  virtual ~LoadSink() = default;
  // Chunk i is a miss from `layer` on (absent, refused, or the cluster did not answer).
  virtual void remote_failed(uint32_t i, uint32_t layer, const std::string& why) = 0;
  // Every chunk of `layer` is in the blocks or failed. The loader's last touch of the batch.
  virtual void remote_landed(uint32_t layer) = 0;
  // A load its waiter may give up on: the fence its bytes pass into the blocks, else null.
  virtual Fence* fence() { return nullptr; }
};

struct TierStats {
  uint64_t hit_chunks = 0;       // found by lookups past the local pool
  uint64_t loaded_chunks = 0;    // taken by loads, every layer checked
  uint64_t written_chunks = 0;   // written through
  uint64_t promoted_chunks = 0;  // copied into the local pool
  uint64_t rejected = 0;         // values refused: another key, shape or layer, or a bad checksum
  uint64_t errors = 0;           // calls the cluster did not answer in time, or could not be made
};

class Tier {
 public:
  virtual ~Tier() = default;
  // How many of `keys`, from the first, the cluster holds; 0 while it is unreachable.
  virtual size_t present(std::span<const Key> keys) = 0;
  // Layer `layer` of `chunks` into the KV blocks (on a loader thread), then
  // sink.remote_landed(layer). `chunks` stays as it is until every issued layer has landed.
  virtual void load_layer(std::deque<RemoteChunk>& chunks, LoadSink& sink, uint32_t layer) = 0;
  // Whole chunks of a prefix of `prefix_tokens` tokens that the local pool holds, stored now or
  // found by a lookup: each counts as a sighting of its chunk, and admitted chunks are written
  // through in the background.
  virtual void offer(std::span<const Key> keys, uint64_t prefix_tokens) = 0;
  // Chunks a load took whole from the cluster: counted, and copied into the local pool in the
  // background (remote_promote).
  virtual void loaded(std::vector<Key> keys) = 0;
  virtual TierStats stats() const = 0;
};

// Connects to the cluster named by `opts.uri` (a warning, not a failure, when it cannot be
// reached yet). Throws EUNSUPPORTED in a build without hiredis, EINVAL for a bad URI.
std::unique_ptr<Tier> make_tier(const TierOptions& opts, const TierParts& parts);

}  // namespace tutti::remote
